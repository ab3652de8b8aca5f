"""What SQLite adds to the ledger (S1), against `memory://` and `sqlite:///` on a manual clock.

The ledger itself (skip records, L1's order, later claims, history, forgotten slots) and C2 for
finish are certified by the conformance kit (test_conformance.py) on every backend. Kept here:
the exact boundaries of SQLite's own lease and lateness predicates (only a manual clock reaches
them), the batch path (`claim_many`, which the kit does not call), with the floor row a forgotten
skip record leaves, read through the file's backdoor.
"""

from __future__ import annotations

from anarchon import (
    Claim,
    ClaimRequest,
    Outcome,
    RunRecord,
    RunStatus,
    SupportsClaimMany,
)
from anarchon.backend import overlap_reason

from .conftest import T0, Harness
from .test_rules import LEASE, MAX_LATE, SLOT, request

COALESCED = "coalesced: a newer slot ran"


def stored(harness: Harness, job: str = "sync", slot: int = SLOT) -> RunRecord:
    """The run the store holds, read behind its back; it must exist."""
    run = harness.raw_run(job, slot)
    assert run is not None, f"no run of {job} at {slot}"
    return run


def late_reason(age: int) -> str:
    return f"late: slot is {age} ms old, max_late is {MAX_LATE} ms"


def skipped(req: ClaimRequest, reason: str) -> Claim:
    return Claim(
        outcome=Outcome.SKIPPED, attempt=0, token=req.token, holder=req.instance, reason=reason
    )


async def test_S1_boundaries_lease_ending_now_is_live_and_max_late_old_is_claimable(
    harness: Harness,
) -> None:
    store = await harness.store()
    first = request(SLOT)
    assert (await store.claim(first)).won
    harness.clock.advance(LEASE)  # first's lease ends exactly now: still live (>= now)
    nxt = request(SLOT + LEASE, instance="b")
    assert await store.claim(nxt) == skipped(nxt, overlap_reason(SLOT))
    assert stored(harness).status is RunStatus.RUNNING  # the holding run is untouched
    harness.clock.now = T0 + MAX_LATE
    assert (await store.claim(request(job="edge"))).won  # exactly max_late old: claimable
    harness.clock.advance(1)
    late = request(job="other", instance="b")
    assert await store.claim(late) == skipped(late, late_reason(MAX_LATE + 1))
    assert stored(harness, "other").error == late_reason(MAX_LATE + 1)


async def test_S1_a_batch_answers_the_recorded_skip(harness: Harness) -> None:
    store, other = await harness.store(), await harness.store()
    skip = request(SLOT, skip_reason=COALESCED)
    answer = await store.claim(skip)
    assert answer == skipped(skip, COALESCED)
    row = stored(harness)
    harness.clock.advance(MAX_LATE * 10)  # late by now: still the recorded answer
    again = [skip, request(SLOT, instance="c"), request(SLOT, instance="d", attempts=1)]
    assert isinstance(other, SupportsClaimMany)  # both stores answer a batch
    assert await other.claim_many(again) == [answer] * len(again)
    assert stored(harness) == row  # nothing was written after the decision


async def test_S1_L11_a_batch_at_the_floor_a_skip_record_left_is_late(harness: Harness) -> None:
    # The kit checks that a skip record is forgotten like a run; here the floor row it leaves
    # (read through the backdoor) and the batch path's answer at it.
    store = await harness.store(history_limit=1, retention_margin_ms=1_000)
    keep = MAX_LATE + 3 * LEASE + 1_000
    harness.clock.now = SLOT + MAX_LATE + 1
    assert (await store.claim(request(SLOT))).outcome is Outcome.SKIPPED  # late: recorded
    harness.clock.now = SLOT + keep + 1
    assert (await store.claim(request(SLOT + keep))).won
    assert harness.raw_run("sync", SLOT) is None
    assert harness.floor("sync") == SLOT
    assert isinstance(store, SupportsClaimMany)
    for req in (
        ClaimRequest(job="sync", slot=SLOT, instance="z", max_late_ms=10 * keep),
        ClaimRequest(job="sync", slot=SLOT, instance="z", skip_reason=COALESCED),
    ):
        for claim in await store.claim_many([req]):
            assert claim.outcome is Outcome.LATE
            assert claim.reason.startswith(f"forgotten: slot {req.slot} is at or below")
            assert (claim.attempt, claim.token, claim.holder) == (0, None, None)
        assert harness.raw_run("sync", req.slot) is None
