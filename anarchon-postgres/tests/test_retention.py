"""L11 in steady state: a job whose history is full. Counting a job's runs walks up to
history_limit index entries, so only about one claim in history_limit / 16 (at most 64) counts
and sweeps; the history stays within a bound of its limit and the floor keeps rising, through
single claims and `claim_many` alike."""

from __future__ import annotations

import psycopg
import pytest

from anarchon import ClaimRequest, Overlap, RunStatus
from anarchon._leases import sweep_every
from anarchon_postgres import PostgresStore, testing
from anarchon_postgres._function import SWEEP_MAX_ROWS

from .conftest import POSTGRES_URL, ManualClock, url_with

LIMIT = 256
"""One claim in 16 sweeps (256 / 16)."""


def runs_of(schema: str, job: str) -> int:
    with psycopg.connect(POSTGRES_URL, autocommit=True) as conn:
        row = conn.execute(
            f'SELECT count(*) FROM "{schema}".anarchon_runs WHERE job = %s', (job,)
        ).fetchone()
    assert row is not None
    return int(row[0])


def request(job: str, slot: int) -> ClaimRequest:
    return ClaimRequest(
        job=job,
        slot=slot,
        instance="t:1:0",
        lease_ms=1_000,
        max_late_ms=1_000,
        overlap=Overlap.ALLOW,
        attempts=1,
    )


@pytest.mark.parametrize("batch", [False, True], ids=["claim", "claim_many"])
async def test_L11_a_full_history_stays_near_its_limit(schema: str, batch: bool) -> None:
    clock = ManualClock()
    store = PostgresStore.create(
        url_with(schema), clock=clock, history_limit=LIMIT, retention_margin_ms=1
    )
    await store.open()
    try:
        jobs = ["a", "b"]
        slot = clock.now
        for n in range(3 * LIMIT):
            slot = clock.now
            requests = [request(job, slot) for job in jobs]
            claims = (
                await store.claim_many(requests)
                if batch
                else [await store.claim(r) for r in requests]
            )
            assert all(c.won for c in claims), claims
            for r in requests:
                assert await store.finish(r.job, slot, r.token, RunStatus.SUCCEEDED)
            clock.advance(1_000)  # each run is past keep_until (slot + 1 s + 1 s + 1 ms) soon
            if n == LIMIT:  # the history is full from here on
                assert runs_of(schema, "a") <= LIMIT + LIMIT // 16 + 1
        bound = LIMIT + min(SWEEP_MAX_ROWS, 8 * sweep_every(LIMIT))
        for job in jobs:
            count = runs_of(schema, job)
            assert LIMIT <= count <= bound, f"{job}: {count} runs kept, limit {LIMIT}"
            floor = testing.floor(POSTGRES_URL, schema, "anarchon_runs", "cron", job)
            assert floor is not None and floor >= slot - (count + 1) * 1_000, floor
            old = await store.claim(
                ClaimRequest(job=job, slot=floor, instance="late:1:0", max_late_ms=10**9)
            )
            assert old.outcome.value == "late", f"a forgotten slot was claimable: {old}"
    finally:
        await store.close()
