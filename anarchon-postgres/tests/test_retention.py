"""L11 in steady state: a job whose history is full. Counting a job's runs walks up to
history_limit index entries, so only about one win in history_limit / 16 (at most 64) counts and
sweeps (`anarchon_test_support.retention`), through single claims and `claim_many` alike."""

from __future__ import annotations

import psycopg
import pytest

from anarchon_postgres import PostgresStore, testing
from anarchon_postgres._plpgsql import SWEEP_MAX_ROWS
from anarchon_test_support import LIMIT, check_full_history

from .conftest import POSTGRES_URL, ManualClock, url_with


@pytest.mark.parametrize("batch", [False, True], ids=["claim", "claim_many"])
async def test_L11_a_full_history_stays_near_its_limit(schema: str, batch: bool) -> None:
    def runs_of(job: str) -> int:
        with psycopg.connect(POSTGRES_URL, autocommit=True) as conn:
            row = conn.execute(
                f'SELECT count(*) FROM "{schema}".anarchon_runs WHERE job = %s', (job,)
            ).fetchone()
        assert row is not None
        return int(row[0])

    clock = ManualClock()
    store = PostgresStore.create(
        url_with(schema), clock=clock, history_limit=LIMIT, retention_margin_ms=1
    )
    await store.open()
    try:
        await check_full_history(
            store,
            clock,
            clock.advance,
            batch=batch,
            sweep_max=SWEEP_MAX_ROWS,
            runs_of=runs_of,
            floor_of=lambda job: testing.floor(POSTGRES_URL, schema, "anarchon_runs", "cron", job),
        )
    finally:
        await store.close()
