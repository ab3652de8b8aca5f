"""L11 in steady state: a job whose history is full. Counting a job's runs walks up to
history_limit index entries, so only about one win in history_limit / 16 (at most 64) counts and
sweeps (`anarchon_test_support.retention`), through single claims and `claim_many` alike."""

from __future__ import annotations

import sqlite3
from pathlib import Path

import pytest

from anarchon_sqlite import SQLiteStore, testing
from anarchon_sqlite._steps import SWEEP_MAX_ROWS
from anarchon_test_support import LIMIT, check_full_history

from .conftest import ManualClock


@pytest.mark.parametrize("batch", [False, True], ids=["claim", "claim_many"])
async def test_L11_a_full_history_stays_near_its_limit(tmp_path: Path, batch: bool) -> None:
    path = tmp_path / "anarchon.db"

    def runs_of(job: str) -> int:
        db = sqlite3.connect(path)
        try:
            query = "SELECT count(*) FROM anarchon_runs WHERE job = ?"
            return int(db.execute(query, (job,)).fetchone()[0])
        finally:
            db.close()

    clock = ManualClock()
    store = SQLiteStore.create(path, clock=clock, history_limit=LIMIT, retention_margin_ms=1)
    await store.open()
    try:
        await check_full_history(
            store,
            clock,
            clock.advance,
            batch=batch,
            sweep_max=SWEEP_MAX_ROWS,
            runs_of=runs_of,
            floor_of=lambda job: testing.floor(path, "cron", job),
        )
    finally:
        await store.close()
