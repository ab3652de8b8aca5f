"""The lease rules L1-L11 and C2, each against `memory://` and `postgresql://` (DESIGN section 5).

Every test asserts the exact answer (outcome, attempt, token, holder, lease end) and what the
store really holds, read through the backdoor. Time moves on a manual clock; leases are aged
with `force_expire`, never by sleeping.
"""

from __future__ import annotations

import asyncio
import time

import psycopg
import pytest
from psycopg import sql

from anarchon import (
    Claim,
    ClaimRequest,
    Outcome,
    Overlap,
    RunRecord,
    RunStatus,
    StoreUnavailable,
    new_token,
)
from anarchon._leases import overlap_reason
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


def stored(harness: Harness, job: str = "sync", slot: int = SLOT) -> RunRecord:
    """The run as the store holds it, read through the backdoor; it must exist."""
    run = harness.raw_run(job, slot)
    assert run is not None, f"no run of {job} at {slot}"
    return run


def skipped(req: ClaimRequest, reason: str) -> Claim:
    """The answer to every claim of a slot that `req` recorded as skipped (S1)."""
    return Claim(
        outcome=Outcome.SKIPPED, attempt=0, token=req.token, holder=req.instance, reason=reason
    )


def skip_record(req: ClaimRequest, now: int, reason: str) -> RunRecord:
    return RunRecord(
        job=req.job,
        slot=req.slot,
        status=RunStatus.SKIPPED,
        attempt=0,
        token=req.token,
        holder=req.instance,
        claimed_at=now,
        lease_until=None,
        finished_at=now,
        error=reason,
    )


def won(req: ClaimRequest, attempt: int, lease_until: int) -> Claim:
    return Claim(
        outcome=Outcome.WON,
        attempt=attempt,
        token=req.token,
        holder=req.instance,
        lease_until=lease_until,
    )


async def test_L1_first_claim_wins_attempt_1(harness: Harness) -> None:
    store = await harness.store()
    harness.clock.advance(250)
    req = request()
    assert await store.claim(req) == won(req, 1, T0 + 250 + LEASE)
    run = harness.raw_run("sync", SLOT)
    assert run is not None
    assert (run.status, run.attempt, run.token, run.holder) == (
        RunStatus.RUNNING,
        1,
        req.token,
        "a",
    )
    assert (run.claimed_at, run.lease_until, run.finished_at) == (T0 + 250, T0 + 250 + LEASE, None)


async def test_L1_late_slot_is_recorded_skipped(harness: Harness) -> None:
    store = await harness.store()
    harness.clock.advance(MAX_LATE)
    assert (await store.claim(request())).won  # exactly max_late old: still claimable
    harness.clock.advance(1)
    late = request(job="other")
    reason = f"late: slot is {MAX_LATE + 1} ms old, max_late is {MAX_LATE} ms"
    assert await store.claim(late) == skipped(late, reason)
    assert stored(harness, "other") == skip_record(late, T0 + MAX_LATE + 1, reason)


async def test_L1_overlap_skip_is_recorded_while_another_slot_is_live(harness: Harness) -> None:
    store = await harness.store()
    first = request(SLOT)
    assert (await store.claim(first)).won
    harness.clock.advance(LEASE)  # first's lease ends exactly now: still live (>= now)
    nxt = request(SLOT + LEASE, instance="b")
    reason = overlap_reason(SLOT)
    assert await store.claim(nxt) == skipped(nxt, reason)
    assert stored(harness, slot=SLOT + LEASE) == skip_record(nxt, T0 + LEASE, reason)
    # The slot is decided: with overlap allowed it is not won either (S1).
    allowed = request(SLOT + LEASE, instance="b", overlap=Overlap.ALLOW)
    assert await store.claim(allowed) == skipped(nxt, reason)
    other = request(SLOT + 2 * LEASE, instance="b", overlap=Overlap.ALLOW)
    assert await store.claim(other) == won(other, 1, T0 + 2 * LEASE)
    harness.clock.advance(1)  # the first lease has ended; `other` still holds one
    third = request(SLOT + LEASE + 1, instance="c")
    assert await store.claim(third) == skipped(third, overlap_reason(SLOT + 2 * LEASE))
    harness.force_expire("sync", SLOT + 2 * LEASE)
    fourth = request(SLOT + LEASE + 2, instance="c")
    assert await store.claim(fourth) == won(fourth, 1, T0 + 2 * LEASE + 1)


async def test_L2_same_token_wins_again_unchanged(harness: Harness) -> None:
    store = await harness.store()
    req = request()
    first = await store.claim(req)
    before = harness.raw_run("sync", SLOT)
    harness.clock.advance(10_000)
    assert await store.claim(req) == first == won(req, 1, T0 + LEASE)
    assert harness.raw_run("sync", SLOT) == before


async def test_L3_other_token_sees_running_until_lease_end(harness: Harness) -> None:
    a, b = await harness.store(), await harness.store()
    req = request()
    await a.claim(req)
    harness.clock.advance(LEASE)  # lease_until == now: still alive
    claim = await b.claim(request(instance="b"))
    assert claim == Claim(
        outcome=Outcome.RUNNING, attempt=1, token=req.token, holder="a", lease_until=T0 + LEASE
    )
    run = harness.raw_run("sync", SLOT)
    assert run is not None and (run.token, run.attempt) == (req.token, 1)


async def test_L4_takeover_after_expiry(harness: Harness) -> None:
    a, b = await harness.store(), await harness.store()
    first = request()
    await a.claim(first)
    harness.clock.advance(5_000)
    harness.force_expire("sync", SLOT)
    backup = request(instance="b")
    assert await b.claim(backup) == won(backup, 2, T0 + 5_000 + LEASE)
    run = harness.raw_run("sync", SLOT)
    assert run is not None
    assert (run.attempt, run.token, run.holder, run.claimed_at) == (
        2,
        backup.token,
        "b",
        T0 + 5_000,
    )
    # The old winner is fenced: its token no longer holds the run.
    assert (await a.claim(first)).outcome is Outcome.RUNNING


async def test_L4_takeover_ignores_lateness(harness: Harness) -> None:
    a, b = await harness.store(), await harness.store()
    await a.claim(request())
    harness.clock.advance(MAX_LATE * 10)  # far past max_late, and past the lease
    backup = request(instance="b")
    assert await b.claim(backup) == won(backup, 2, T0 + MAX_LATE * 10 + LEASE)


async def test_L5_no_attempts_left_marks_interrupted(harness: Harness) -> None:
    a, b = await harness.store(), await harness.store()
    first = request(attempts=2)
    await a.claim(first)
    harness.force_expire("sync", SLOT)
    second = request(instance="b", attempts=2)
    assert (await b.claim(second)).attempt == 2
    harness.clock.advance(1_000)
    harness.force_expire("sync", SLOT)
    claim = await a.claim(request(instance="c", attempts=2))
    assert claim == Claim(
        outcome=Outcome.DONE,
        attempt=2,
        token=second.token,
        holder="b",
        lease_until=T0 + 1_000 - 1,
        reason="run interrupted: the last attempt's lease ran out",
    )
    run = harness.raw_run("sync", SLOT)
    assert run is not None
    assert (run.status, run.attempt, run.finished_at) == (RunStatus.INTERRUPTED, 2, T0 + 1_000)
    assert run.error == "lease of attempt 2 ran out with no attempts left"


@pytest.mark.parametrize("status", [RunStatus.SUCCEEDED, RunStatus.FAILED])
async def test_L6_finished_run_is_done_for_any_token(harness: Harness, status: RunStatus) -> None:
    store = await harness.store()
    req = request()
    await store.claim(req)
    assert await store.finish(
        "sync", SLOT, req.token, status, "boom" if status.value == "failed" else None
    )
    harness.force_expire("sync", SLOT)
    for other in (req, request(instance="b"), request(instance="c", attempts=1)):
        claim = await store.claim(other)
        assert claim == Claim(
            outcome=Outcome.DONE,
            attempt=1,
            token=req.token,
            holder="a",
            lease_until=T0 - 1,
            reason=f"run {status.value}",
        )


async def test_L7_renew_only_with_the_holding_token(harness: Harness) -> None:
    a, b = await harness.store(), await harness.store()
    first = request()
    await a.claim(first)
    harness.clock.advance(10_000)
    assert await a.renew("sync", SLOT, first.token, 45_000)
    assert stored(harness).lease_until == T0 + 10_000 + 45_000
    assert not await a.renew("sync", SLOT, new_token(), 45_000)
    assert not await a.renew("sync", SLOT + 1, first.token, 45_000)
    harness.force_expire("sync", SLOT)
    backup = request(instance="b")
    await b.claim(backup)
    assert not await a.renew("sync", SLOT, first.token, 45_000)  # fenced after the takeover
    assert stored(harness).lease_until == T0 + 10_000 + LEASE
    assert await b.finish("sync", SLOT, backup.token, RunStatus.SUCCEEDED)
    assert not await b.renew("sync", SLOT, backup.token, 45_000)  # finished: nothing to renew


async def test_L8_finish_only_with_the_holding_token(harness: Harness) -> None:
    a, b = await harness.store(), await harness.store()
    first = request()
    await a.claim(first)
    harness.force_expire("sync", SLOT)
    backup = request(instance="b")
    await b.claim(backup)
    harness.clock.advance(2_000)
    assert not await a.finish("sync", SLOT, first.token, RunStatus.SUCCEEDED)  # fenced
    assert stored(harness).status is RunStatus.RUNNING
    assert await b.finish("sync", SLOT, backup.token, RunStatus.FAILED, "disk full")
    run = harness.raw_run("sync", SLOT)
    assert run is not None
    assert (run.status, run.error, run.finished_at, run.attempt) == (
        RunStatus.FAILED,
        "disk full",
        T0 + 2_000,
        2,
    )
    assert not await b.finish("sync", SLOT, backup.token, RunStatus.SUCCEEDED)  # only once
    assert harness.raw_run("sync", SLOT) == run
    for status in (RunStatus.RUNNING, RunStatus.SKIPPED):
        with pytest.raises(ValueError, match="needs succeeded, failed or interrupted"):
            await b.finish("sync", SLOT, backup.token, status)


async def test_L9_release_hands_over_at_once(harness: Harness) -> None:
    a, b = await harness.store(), await harness.store()
    first = request()
    await a.claim(first)
    harness.clock.advance(3_000)
    assert not await a.release("sync", SLOT, new_token())
    assert await a.release("sync", SLOT, first.token)
    run = harness.raw_run("sync", SLOT)
    assert run is not None
    assert (run.status, run.lease_until) == (RunStatus.RUNNING, T0 + 3_000 - 1)
    backup = request(instance="b")
    assert await b.claim(backup) == won(backup, 2, T0 + 3_000 + LEASE)  # no waiting
    assert not await a.release("sync", SLOT, first.token)


async def test_L10_check_reads_then_claims_only_an_expired_run(harness: Harness) -> None:
    a, b = await harness.store(), await harness.store()
    first = request()
    backup = request(instance="b")
    await a.claim(first)
    assert await b.check(backup) == Claim(
        outcome=Outcome.RUNNING, attempt=1, token=first.token, holder="a", lease_until=T0 + LEASE
    )
    assert await a.check(first) == won(first, 1, T0 + LEASE)  # the holder's own check: L2
    harness.force_expire("sync", SLOT)
    assert await b.check(backup) == won(backup, 2, T0 + LEASE)
    await b.finish("sync", SLOT, backup.token, RunStatus.SUCCEEDED)
    claim = await a.check(first)
    assert (claim.outcome, claim.attempt, claim.token) == (Outcome.DONE, 2, backup.token)


async def test_L10_check_of_a_missing_run_is_the_claim_step(harness: Harness) -> None:
    store = await harness.store()
    req = request()
    assert await store.check(req) == won(req, 1, T0 + LEASE)
    harness.clock.advance(MAX_LATE + 1)
    never = request(job="never")
    reason = f"late: slot is {MAX_LATE + 1} ms old, max_late is {MAX_LATE} ms"
    assert await store.check(never) == skipped(never, reason)  # recorded as a claim would (S1)
    assert stored(harness, "never").status is RunStatus.SKIPPED


async def test_L10_check_of_an_expired_last_attempt_is_done(harness: Harness) -> None:
    a, b = await harness.store(), await harness.store()
    await a.claim(request(attempts=1))
    harness.force_expire("sync", SLOT)
    claim = await b.check(request(instance="b", attempts=1))
    assert (claim.outcome, claim.attempt) == (Outcome.DONE, 1)
    assert stored(harness).status is RunStatus.INTERRUPTED


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


async def test_L11_forgotten_runs_raise_the_floor(harness: Harness) -> None:
    store = await harness.store(history_limit=2, retention_margin_ms=1_000)
    keep = MAX_LATE + 3 * LEASE + 1_000  # slot + max_late + attempts * lease + margin
    slots = [SLOT, SLOT + 1_000, SLOT + 2_000]
    for i, slot in enumerate(slots):
        harness.clock.now = slot
        req = request(slot, instance=f"i{i}", overlap=Overlap.ALLOW)
        assert (await store.claim(req)).won
        await store.finish("sync", slot, req.token, RunStatus.SUCCEEDED)
    # Three runs, limit two, but none is past keep_until yet: nothing is forgotten.
    assert [r.slot for r in await store.history("sync")] == slots[::-1]
    assert harness.floor("sync") is None
    harness.clock.now = SLOT + keep + 1  # the oldest run may now go
    new = request(SLOT + keep, overlap=Overlap.ALLOW)
    assert (await store.claim(new)).won
    assert harness.raw_run("sync", SLOT) is None
    assert harness.floor("sync") == SLOT
    assert [r.slot for r in await store.history("sync")] == [SLOT + keep, *slots[:0:-1]]
    # The forgotten slot can never be won again, even with a huge max_late.
    again = ClaimRequest(job="sync", slot=SLOT, instance="z", max_late_ms=10 * keep)
    claim = await store.claim(again)
    assert claim.outcome is Outcome.LATE
    assert claim.reason.startswith(f"forgotten: slot {SLOT} is at or below")
    assert harness.raw_run("sync", SLOT) is None


async def test_L11_a_live_lease_is_never_forgotten(harness: Harness) -> None:
    store = await harness.store(history_limit=1, retention_margin_ms=1_000)
    keep = MAX_LATE + 3 * LEASE + 1_000
    old = request(SLOT, overlap=Overlap.ALLOW)
    await store.claim(old)
    harness.clock.now = SLOT + keep + 1
    assert await store.renew("sync", SLOT, old.token, LEASE)  # still held, past keep_until
    assert (await store.claim(request(SLOT + keep, overlap=Overlap.ALLOW))).won
    assert harness.raw_run("sync", SLOT) is not None
    assert harness.floor("sync") is None


async def test_C2_resent_claim_is_recognised(harness: Harness) -> None:
    a, b = await harness.store(), await harness.store()
    req = request()
    first = await a.claim(req)
    # The reply was lost: the same request arrives again, through another connection too.
    assert await a.claim(req) == first
    assert await b.claim(req) == first
    run = harness.raw_run("sync", SLOT)
    assert run is not None and (run.attempt, run.token) == (1, req.token)
    await a.finish("sync", SLOT, req.token, RunStatus.SUCCEEDED)
    done = await b.claim(req)
    assert (done.outcome, done.token, done.attempt) == (Outcome.DONE, req.token, 1)
