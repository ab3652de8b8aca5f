"""What PostgreSQL adds to the lease rules: losers and checks take no lock, and a claim that
waited for the job's row lock decides by the clock read after it (T1).

The rules themselves (L1-L11, C2, the ledger) are certified by the conformance kit
(test_conformance.py), on PostgreSQL as on every backend; only what is PostgreSQL's own is
tested here.
"""

from __future__ import annotations

import asyncio
import time

import psycopg
import pytest
from psycopg import sql

from anarchon import ClaimRequest, Outcome, RunStatus, StoreUnavailable
from anarchon_postgres import PostgresStore, testing

from .conftest import POSTGRES_URL, T0, Harness, new_schema, require_server, url_with

SLOT = T0
LEASE = 30_000
MAX_LATE = 60_000


def request(
    slot: int = SLOT, *, job: str = "sync", instance: str = "a", **kw: object
) -> ClaimRequest:
    return ClaimRequest(
        job=job,
        slot=slot,
        instance=instance,
        lease_ms=LEASE,
        max_late_ms=MAX_LATE,
        **kw,  # type: ignore[arg-type]
    )


def hold_job_lock(harness: Harness, job: str = "sync") -> psycopg.Connection[tuple[object, ...]]:
    """Another session holds the job's row lock in `<table>_jobs` until it is rolled back."""
    conn = psycopg.connect(POSTGRES_URL)
    conn.execute(
        sql.SQL("INSERT INTO {} (prefix, job) VALUES ('cron', %s) ON CONFLICT DO NOTHING").format(
            sql.Identifier(harness.schema, "anarchon_runs_jobs")
        ),
        (job,),
    )
    conn.commit()
    conn.execute(
        sql.SQL("SELECT 1 FROM {} WHERE prefix = 'cron' AND job = %s FOR UPDATE").format(
            sql.Identifier(harness.schema, "anarchon_runs_jobs")
        ),
        (job,),
    )
    return conn


async def test_losers_and_checks_take_no_lock() -> None:
    # PostgreSQL only: a claim or check that finds the run taken is answered by a plain read,
    # so it does not wait for the job's row lock (a loser costs a read, not a locked write).
    require_server()
    harness = Harness("postgres", new_schema())
    try:
        holder = await harness.store()
        backup = await harness.store(statement_timeout_ms=300)
        first = request()
        await holder.claim(first)
        harness.clock.advance(1)
        for slot in (SLOT + 1, SLOT - MAX_LATE - 10):  # record an overlap and a late slot
            assert (await holder.claim(request(slot, instance="b"))).outcome is Outcome.SKIPPED
        blocker = hold_job_lock(harness)
        try:
            started = time.monotonic()
            for call in (backup.check, backup.claim):
                claim = await asyncio.wait_for(call(request(instance="b")), timeout=5)
                assert claim.outcome is Outcome.RUNNING
                assert (await backup.claim(first)).won  # L2: the holder's resend, no lock either
            assert time.monotonic() - started < 0.25
            # A slot recorded skipped (S1) is answered by the read too.
            for slot in (SLOT + 1, SLOT - MAX_LATE - 10):  # an overlap, a late slot
                claim = await asyncio.wait_for(backup.claim(request(slot, instance="c")), 5)
                assert claim.outcome is Outcome.SKIPPED and claim.holder == "b", claim
            # The claim step itself needs the lock: it waits statement_timeout_ms, then gives up.
            harness.force_expire("sync", SLOT)
            started = time.monotonic()
            with pytest.raises(StoreUnavailable, match="timed out"):
                await backup.claim(request(instance="b"))
            assert time.monotonic() - started >= 0.25
        finally:
            blocker.rollback()
            blocker.close()
        assert (await backup.claim(request(instance="b"))).attempt == 2
    finally:
        await harness.close()
        testing.drop(POSTGRES_URL, harness.schema)


async def test_lock_wait_longer_than_the_lease_reads_the_clock_after_the_lock() -> None:
    # On the server clock: `now()` would be the transaction start, before the wait.
    require_server()
    schema = new_schema()
    harness = Harness("postgres", schema)
    try:
        a = PostgresStore.create(url_with(schema))
        b = PostgresStore.create(url_with(schema))
        await a.open()
        await b.open()
        now = await a.now_ms()
        lease = 300
        first = ClaimRequest(job="sync", slot=now, instance="a", lease_ms=lease)
        assert (await a.claim(first)).won
        await asyncio.sleep(lease / 1000 + 0.05)  # the lease ran out: a claim takes the lock path
        blocker = hold_job_lock(harness)
        try:
            backup = ClaimRequest(job="sync", slot=now, instance="b", lease_ms=lease)
            waiting = asyncio.ensure_future(b.claim(backup))
            await asyncio.sleep(0.2)
            assert not waiting.done()  # b waits for the job's row lock
            assert await a.renew("sync", now, first.token, 5_000)  # a renews meanwhile
            # Longer than the lease: a decision with the clock read before the lock would see
            # the lease that a renewed long after, and it is the renewed row that counts.
            await asyncio.sleep(lease / 1000 + 0.1)
        finally:
            blocker.rollback()
            blocker.close()
        claim = await asyncio.wait_for(waiting, 10)
        assert claim.outcome is Outcome.RUNNING and claim.token == first.token, claim
        # Lateness: a slot that turns late while the claim waits for the lock is late, by the
        # clock read after the lock: the age in the recorded reason is that clock's.
        slot = await a.now_ms() - 60_000 + 300
        blocker = hold_job_lock(harness, "edge")
        try:
            waiting = asyncio.ensure_future(
                b.claim(ClaimRequest(job="edge", slot=slot, instance="b"))
            )
            await asyncio.sleep(0.6)
        finally:
            blocker.rollback()
            blocker.close()
        late = await asyncio.wait_for(waiting, 10)
        run = testing.raw_run(POSTGRES_URL, schema, "anarchon_runs", "cron", "edge", slot)
        assert run is not None and run.claimed_at is not None, run
        age = run.claimed_at - slot
        assert age > 60_000, run  # less than 59,800 before the wait
        assert (late.outcome, late.reason) == (
            Outcome.SKIPPED,
            f"late: slot is {age} ms old, max_late is 60000 ms",
        )
        assert (run.status, run.error, run.finished_at) == (
            RunStatus.SKIPPED,
            late.reason,
            age + slot,
        )
        await a.close()
        await b.close()
    finally:
        testing.drop(POSTGRES_URL, schema)
