"""L11 in steady state: a job whose history is full. Counting a job's runs walks up to
history_limit index entries, so only about one claim in `sweep_every(history_limit)` counts and
sweeps; the history stays within a bound of its limit and the floor keeps rising."""

from __future__ import annotations

import sqlite3
from pathlib import Path

import pytest

from anarchon import ClaimRequest, Outcome, Overlap, RunStatus
from anarchon._leases import sweep_every
from anarchon_sqlite import SQLiteStore, testing
from anarchon_sqlite._steps import SWEEP_MAX_ROWS

from .conftest import ManualClock

LIMIT = 256
"""One claim in 16 sweeps (256 / 16)."""


def runs_of(path: Path, job: str) -> int:
    db = sqlite3.connect(path)
    try:
        return int(
            db.execute("SELECT count(*) FROM anarchon_runs WHERE job = ?", (job,)).fetchone()[0]
        )
    finally:
        db.close()


@pytest.mark.parametrize("batch", [False, True], ids=["claim", "claim_many"])
async def test_L11_a_full_history_stays_near_its_limit(tmp_path: Path, batch: bool) -> None:
    clock = ManualClock()
    path = tmp_path / "anarchon.db"
    store = SQLiteStore.create(path, clock=clock, history_limit=LIMIT, retention_margin_ms=1)
    await store.open()
    try:
        jobs = ["a", "b"]
        slot = clock.now
        for _ in range(3 * LIMIT):
            slot = clock.now
            requests = [
                ClaimRequest(
                    job=job,
                    slot=slot,
                    instance="t:1:0",
                    lease_ms=1_000,
                    max_late_ms=1_000,
                    overlap=Overlap.ALLOW,
                    attempts=1,
                )
                for job in jobs
            ]
            claims = (
                await store.claim_many(requests)
                if batch
                else [await store.claim(r) for r in requests]
            )
            assert all(c.won for c in claims), claims
            for r in requests:
                assert await store.finish(r.job, slot, r.token, RunStatus.SUCCEEDED)
            clock.advance(1_000)
        bound = LIMIT + min(SWEEP_MAX_ROWS, 8 * sweep_every(LIMIT))
        for job in jobs:
            count = runs_of(path, job)
            assert LIMIT <= count <= bound, f"{job}: {count} runs kept, limit {LIMIT}"
            floor = testing.floor(path, "cron", job)
            assert floor is not None and floor >= slot - (count + 1) * 1_000, floor
            old = await store.claim(
                ClaimRequest(job=job, slot=floor, instance="late:1:0", max_late_ms=10**9)
            )
            assert old.outcome is Outcome.LATE, f"a forgotten slot was claimable: {old}"
    finally:
        await store.close()
