"""The ledger (S1: L1's recorded skips) and C2 for finish, against `memory://` and `sqlite:///`.

A slot decided not to run is written as a ``skipped`` row by the claim that decides it; every
later claim answers from that row. Each test asserts the answer and the row the file really
holds (read through the backdoor), on a manual clock.
"""

from __future__ import annotations

import pytest

from anarchon import (
    Claim,
    ClaimRequest,
    Outcome,
    Overlap,
    RunRecord,
    RunStatus,
    SupportsClaimMany,
)

from .conftest import T0, Harness
from .test_rules import LEASE, MAX_LATE, SLOT, request, stored, won

COALESCED = "coalesced: a newer slot ran"


def overlap_reason(holding: int) -> str:
    return f"overlap: slot {holding} of this job holds a live lease and overlap is 'skip'"


def late_reason(age: int) -> str:
    return f"late: slot is {age} ms old, max_late is {MAX_LATE} ms"


def skip_row(req: ClaimRequest, now: int, reason: str) -> RunRecord:
    """The row S1 says the deciding claim writes."""
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


def skipped(req: ClaimRequest, reason: str) -> Claim:
    return Claim(
        outcome=Outcome.SKIPPED, attempt=0, token=req.token, holder=req.instance, reason=reason
    )


async def test_S1_overlap_is_recorded_with_the_holding_slot(harness: Harness) -> None:
    store = await harness.store()
    first = request(SLOT)
    assert (await store.claim(first)).won
    harness.clock.advance(LEASE)  # first's lease ends exactly now: still live (>= now)
    nxt = request(SLOT + LEASE, instance="b")
    claim = await store.claim(nxt)
    assert claim == skipped(nxt, overlap_reason(SLOT))
    assert claim.skip_kind == "overlap"
    assert stored(harness, slot=SLOT + LEASE) == skip_row(nxt, T0 + LEASE, overlap_reason(SLOT))
    assert stored(harness).status is RunStatus.RUNNING  # the holding run is untouched


async def test_S1_overlap_names_a_slot_that_holds_a_lease_when_several_do(
    harness: Harness,
) -> None:
    store = await harness.store()
    held = [SLOT, SLOT + 1_000]
    for slot in held:
        harness.clock.now = slot
        assert (await store.claim(request(slot, overlap=Overlap.ALLOW))).won
    harness.clock.now = SLOT + 2_000
    harness.force_expire("sync", SLOT + 1_000)  # only SLOT still holds a lease
    nxt = request(SLOT + 2_000, instance="b")
    assert await store.claim(nxt) == skipped(nxt, overlap_reason(SLOT))
    harness.clock.now = SLOT + 3_000
    both = request(SLOT + 3_000, instance="c", overlap=Overlap.ALLOW)
    assert (await store.claim(both)).won  # allow: runs next to SLOT's live lease
    third = request(SLOT + 4_000, instance="d")
    claim = await store.claim(third)
    assert claim.outcome is Outcome.SKIPPED
    assert claim.reason in (overlap_reason(SLOT), overlap_reason(SLOT + 3_000))
    assert stored(harness, slot=SLOT + 4_000).error == claim.reason


async def test_S1_late_is_recorded(harness: Harness) -> None:
    store = await harness.store()
    harness.clock.advance(MAX_LATE)
    assert (await store.claim(request())).won  # exactly max_late old: still claimable
    harness.clock.advance(1)
    late = request(job="other", instance="b")
    claim = await store.claim(late)
    assert claim == skipped(late, late_reason(MAX_LATE + 1))
    assert claim.skip_kind == "late"
    assert stored(harness, "other") == skip_row(late, T0 + MAX_LATE + 1, late_reason(MAX_LATE + 1))


async def test_S1_skip_reason_is_recorded(harness: Harness) -> None:
    store = await harness.store()
    harness.clock.advance(500)
    req = request(skip_reason=COALESCED)
    claim = await store.claim(req)
    assert claim == skipped(req, COALESCED)
    assert claim.skip_kind == "coalesced"
    assert stored(harness) == skip_row(req, T0 + 500, COALESCED)


async def test_S1_L1_order_late_before_skip_reason_before_overlap(harness: Harness) -> None:
    store = await harness.store()
    holder = request(SLOT, job="held")
    assert (await store.claim(holder)).won
    # A caller's reason beats overlap: the slot is recorded with the caller's words.
    coalesced = request(SLOT + 1, job="held", instance="b", skip_reason=COALESCED)
    assert await store.claim(coalesced) == skipped(coalesced, COALESCED)
    # Lateness beats the caller's reason.
    harness.clock.advance(MAX_LATE + 1)
    late = request(job="late", instance="c", skip_reason=COALESCED)
    assert await store.claim(late) == skipped(late, late_reason(MAX_LATE + 1))
    assert stored(harness, "late").error == late_reason(MAX_LATE + 1)


async def test_S1_skip_reason_does_not_touch_a_slot_that_has_a_run(harness: Harness) -> None:
    store = await harness.store()
    req = request()
    first = await store.claim(req)
    assert first == won(req, 1, T0 + LEASE)
    assert await store.claim(request(instance="b", skip_reason=COALESCED)) == Claim(
        outcome=Outcome.RUNNING, attempt=1, token=req.token, holder="a", lease_until=T0 + LEASE
    )
    same = ClaimRequest(
        job="sync",
        slot=SLOT,
        instance="a",
        token=req.token,
        lease_ms=LEASE,
        max_late_ms=MAX_LATE,
        skip_reason=COALESCED,
    )
    assert await store.claim(same) == first  # L2: the run's holder, resent
    assert stored(harness).status is RunStatus.RUNNING


async def test_S1_later_claims_answer_skipped(harness: Harness) -> None:
    store, other = await harness.store(), await harness.store()
    first = request(SLOT)
    await store.claim(first)
    nxt = request(SLOT + 1, instance="b")
    answer = await store.claim(nxt)
    assert answer == skipped(nxt, overlap_reason(SLOT))
    row = stored(harness, slot=SLOT + 1)
    # The holding lease ends: the overlap is over, but the slot was decided.
    assert await store.release("sync", SLOT, first.token)
    harness.clock.advance(1_000)
    again = [
        nxt,  # the deciding request, resent (C2)
        request(SLOT + 1, instance="c"),
        request(SLOT + 1, instance="d", overlap=Overlap.ALLOW),
        request(SLOT + 1, instance="e", attempts=1),
    ]
    for req in again:
        assert await store.claim(req) == answer
        assert await other.check(req) == answer
    batch: object = other  # both stores answer a batch (Capabilities.batch)
    assert isinstance(batch, SupportsClaimMany)
    assert await batch.claim_many(again) == [answer] * len(again)
    harness.clock.advance(MAX_LATE * 10)  # late by now: still the recorded answer
    assert await other.claim(request(SLOT + 1, instance="f")) == answer
    assert stored(harness, slot=SLOT + 1) == row  # nothing was written after the decision
    # The holder of a skip record holds nothing: it cannot renew, release or finish it.
    assert not await store.renew("sync", SLOT + 1, nxt.token, LEASE)
    assert not await store.release("sync", SLOT + 1, nxt.token)
    assert not await store.finish("sync", SLOT + 1, nxt.token, RunStatus.SUCCEEDED)
    assert stored(harness, slot=SLOT + 1) == row


async def test_S1_history_shows_the_record(harness: Harness) -> None:
    store = await harness.store()
    first = request(SLOT)
    await store.claim(first)
    await store.claim(request(SLOT + 1, instance="b"))  # overlap: recorded
    await store.finish("sync", SLOT, first.token, RunStatus.SUCCEEDED)
    await store.claim(request(SLOT + 2, instance="c", skip_reason=COALESCED))
    history = await store.history("sync")
    assert [(r.slot, r.status, r.attempt, r.error) for r in history] == [
        (SLOT + 2, RunStatus.SKIPPED, 0, COALESCED),
        (SLOT + 1, RunStatus.SKIPPED, 0, overlap_reason(SLOT)),
        (SLOT, RunStatus.SUCCEEDED, 1, None),
    ]
    assert history == [stored(harness, slot=r.slot) for r in history]
    assert all(r.status.finished for r in history)


async def test_S1_floor_still_answers_late_with_no_write(harness: Harness) -> None:
    # Skip records are runs for retention: kept until keep_until, counted in history_limit,
    # forgotten like any run, and the floor they leave answers late with nothing written.
    store = await harness.store(history_limit=1, retention_margin_ms=1_000)
    keep = MAX_LATE + 3 * LEASE + 1_000
    harness.clock.now = SLOT + MAX_LATE + 1
    assert (await store.claim(request(SLOT))).outcome is Outcome.SKIPPED  # late: recorded
    harness.clock.now = SLOT + keep + 1
    assert (await store.claim(request(SLOT + keep))).won
    assert harness.raw_run("sync", SLOT) is None
    assert harness.floor("sync") == SLOT
    for req in (
        ClaimRequest(job="sync", slot=SLOT, instance="z", max_late_ms=10 * keep),
        ClaimRequest(job="sync", slot=SLOT, instance="z", skip_reason=COALESCED),
        request(SLOT - 1, instance="y"),
    ):
        claim = await store.claim(req)
        assert claim.outcome is Outcome.LATE
        assert claim.reason.startswith(f"forgotten: slot {req.slot} is at or below")
        assert (claim.attempt, claim.token, claim.holder) == (0, None, None)
        assert harness.raw_run("sync", req.slot) is None


async def test_C2_resent_finish_is_true_and_writes_nothing(harness: Harness) -> None:
    store, other = await harness.store(), await harness.store()
    req = request()
    await store.claim(req)
    harness.clock.advance(2_000)
    assert await store.finish("sync", SLOT, req.token, RunStatus.FAILED, "disk full")
    row = stored(harness)
    assert (row.status, row.error, row.finished_at) == (RunStatus.FAILED, "disk full", T0 + 2_000)
    harness.clock.advance(3_000)
    # The first answer was lost: the same finish is sent again, on another connection too.
    assert await store.finish("sync", SLOT, req.token, RunStatus.FAILED, "disk full")
    assert await other.finish("sync", SLOT, req.token, RunStatus.FAILED, "other words")
    assert stored(harness) == row


@pytest.mark.parametrize("first", [RunStatus.SUCCEEDED, RunStatus.FAILED])
async def test_C2_finish_with_another_status_after_finishing_is_false(
    harness: Harness, first: RunStatus
) -> None:
    store = await harness.store()
    req = request()
    await store.claim(req)
    assert await store.finish("sync", SLOT, req.token, first)
    row = stored(harness)
    harness.clock.advance(1_000)
    for status in (RunStatus.SUCCEEDED, RunStatus.FAILED, RunStatus.INTERRUPTED):
        if status is not first:
            assert not await store.finish("sync", SLOT, req.token, status)
    assert stored(harness) == row


async def test_C2_finish_after_takeover_is_false(harness: Harness) -> None:
    a, b = await harness.store(), await harness.store()
    first = request()
    await a.claim(first)
    harness.force_expire("sync", SLOT)
    backup = request(instance="b")
    assert (await b.claim(backup)).attempt == 2
    assert not await a.finish("sync", SLOT, first.token, RunStatus.SUCCEEDED)  # fenced
    assert stored(harness).token == backup.token
    assert await b.finish("sync", SLOT, backup.token, RunStatus.SUCCEEDED)
    row = stored(harness)
    # Same status as the run finished with, but another attempt's token: still fenced.
    assert not await a.finish("sync", SLOT, first.token, RunStatus.SUCCEEDED)
    assert await b.finish("sync", SLOT, backup.token, RunStatus.SUCCEEDED)  # the holder's resend
    assert stored(harness) == row


async def test_C2_finish_of_an_interrupted_run_is_false_for_its_holder(harness: Harness) -> None:
    # L5 marks the run interrupted: its last holder's finish is fenced, even a resent one.
    a, b = await harness.store(), await harness.store()
    last = request(attempts=1)
    await a.claim(last)
    harness.force_expire("sync", SLOT)
    assert (await b.claim(request(instance="b", attempts=1))).outcome is Outcome.DONE
    assert stored(harness).status is RunStatus.INTERRUPTED
    assert not await a.finish("sync", SLOT, last.token, RunStatus.SUCCEEDED)
