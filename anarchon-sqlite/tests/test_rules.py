"""The lease rules L1-L11 and C2, each against `memory://` and `sqlite:///` (DESIGN section 5).

Every test asserts the exact answer (outcome, attempt, token, holder, lease end) and what the
store really holds, read through the backdoor. Time moves on a manual clock; leases are aged
with `force_expire`, never by sleeping.
"""

from __future__ import annotations

import asyncio
import sqlite3
import time
from pathlib import Path

import pytest

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

from .conftest import T0, Harness

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


# L1's other answers (late, skip_reason, overlap: recorded skips) are in test_ledger.py.


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
        with pytest.raises(ValueError, match="succeeded, failed or interrupted"):
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
    late = request(job="never")
    claim = await store.check(late)
    assert claim.outcome is Outcome.SKIPPED  # the claim step records the late slot (S1)
    assert claim.reason == f"late: slot is {MAX_LATE + 1} ms old, max_late is {MAX_LATE} ms"
    assert stored(harness, "never").status is RunStatus.SKIPPED
    assert await store.check(request(job="never", instance="b")) == claim  # read, not claimed


async def test_L10_check_of_an_expired_last_attempt_is_done(harness: Harness) -> None:
    a, b = await harness.store(), await harness.store()
    await a.claim(request(attempts=1))
    harness.force_expire("sync", SLOT)
    claim = await b.check(request(instance="b", attempts=1))
    assert (claim.outcome, claim.attempt) == (Outcome.DONE, 1)
    assert stored(harness).status is RunStatus.INTERRUPTED


async def test_L10_sqlite_check_of_a_live_run_takes_no_write_lock(tmp_path: Path) -> None:
    # SQLite only: memory:// has no write lock to avoid.
    harness = Harness("sqlite", tmp_path)
    holder = await harness.store()
    backup_store = await harness.store(busy_timeout_ms=200)
    first = request()
    await holder.claim(first)
    blocker = sqlite3.connect(harness.path, isolation_level=None)
    try:
        blocker.execute("BEGIN IMMEDIATE")  # another process holds the write lock
        started = time.monotonic()
        claim = await asyncio.wait_for(backup_store.check(request(instance="b")), timeout=5)
        assert claim.outcome is Outcome.RUNNING
        assert time.monotonic() - started < 0.15  # answered without waiting for the lock
        # The claim step itself needs the lock: it waits busy_timeout_ms, then gives up.
        started = time.monotonic()
        with pytest.raises(StoreUnavailable, match="busy_timeout_ms=200"):
            await backup_store.claim(request(instance="b"))
        assert time.monotonic() - started >= 0.19
    finally:
        blocker.execute("ROLLBACK")
        blocker.close()
    assert (await backup_store.claim(request(instance="b"))).outcome is Outcome.RUNNING
    await harness.close()


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
