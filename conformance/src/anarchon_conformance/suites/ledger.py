"""S1, the ledger: a claim that decides a slot is not to run records it, in its atomic step, as a
``skipped`` run with its reason; later claims of the slot answer `skipped` and never `won`.

On every store a request with a `skip_reason` takes the slot (nobody can win it after); stores
with `capabilities.skips` keep and show the record, and lease stores also record the slots they
decide late or overlapping themselves (L1). A forgotten slot (at or below the job's floor, L11)
stays `late` with nothing written: its run may have happened."""

from __future__ import annotations

import asyncio
import time

import pytest

from anarchon import ClaimRequest, LeaseStore, Outcome, Overlap, RunRecord, RunStatus

from .._harness import BackendHarness
from .._rules import rule
from ._base import HarnessSuite, require, within

__all__ = ["LedgerTests"]

REASON = "coalesced: a newer slot is due too (conformance kit)"

FORGET_WITHIN_S = 5.0
"""How long the forgotten-slot check waits for the store to delete a run past its retention."""


def assert_skip_record(
    run: RunRecord | None, request: ClaimRequest, reason: str, before: int, after: int
) -> None:
    """The store's record of a skip decided by `request` between the store clock instants
    `before` and `after`: skipped, attempt 0, the deciding token and instance, the reason."""
    where = f"slot {request.slot} of job {request.job!r}"
    assert run is not None, (
        f"S1: the claim answered skipped but the store holds nothing for {where}: a decided skip "
        "must be recorded in the claim's atomic step, so later claims answer it too"
    )
    assert run.status is RunStatus.SKIPPED and run.attempt == 0, (
        f"S1: a skip record has status skipped and attempt 0, got {run}"
    )
    assert (run.token, run.holder) == (request.token, request.instance), (
        f"S1: a skip record holds the deciding claim's token and instance, got {run}"
    )
    assert run.error == reason, f"S1: the record keeps the reason {reason!r} as its error: {run}"
    assert run.lease_until is None, f"S1: a skip holds no lease: {run}"
    assert run.claimed_at is not None and run.finished_at == run.claimed_at, (
        f"S1: a skip is claimed and finished at the same instant: {run}"
    )
    assert before - 5 <= run.claimed_at <= after + 5, (
        f"S1: a skip is recorded at the store's now ({before}..{after}), got {run.claimed_at}"
    )


class LedgerTests(HarnessSuite):
    """S1 and the skip half of L1."""

    async def assert_in_history(
        self, harness: BackendHarness, request: ClaimRequest, reason: str
    ) -> None:
        """`history` shows the skip decided by `request`, with its reason."""
        if not (harness.capabilities.history and harness.capabilities.skips):
            return
        store = await self.open(harness)
        runs = {r.slot: r for r in await within(store.history(request.job, 20))}
        run = runs.get(request.slot)
        assert run is not None and run.status is RunStatus.SKIPPED, (
            f"S1: history shows slot {request.slot} as skipped, got {run}"
        )
        assert run.error == reason, f"S1: history shows the skip's reason {reason!r}: {run}"

    @rule("S1")
    @pytest.mark.asyncio
    async def test_S1_skip_reason_is_never_won(self, harness: BackendHarness) -> None:
        skips = harness.capabilities.skips
        assert skips or not harness.capabilities.leases, (
            "S1: a lease store records every skip it decides (L1) and must say so: "
            "Capabilities(skips=True)"
        )
        store = await self.open(harness)
        other = await self.open(harness)
        slot = await self.current_slot(store)
        request = self.request("s1skip", slot, instance="host:1:5a1p", skip_reason=REASON)
        before = await self.now(store)
        answers = [await within(store.claim(request))]
        after = await self.now(store)
        assert await within(harness.raw_run("s1skip", slot)) is not None, (
            "S1: a request with a skip_reason takes the slot like a claim; the store holds nothing"
        )
        answers.append(await within(other.claim(self.request("s1skip", slot))))
        answers.append(await within(store.claim(request)))  # resent, same token
        answers.append(await within(other.claim(self.request("s1skip", slot, skip_reason=REASON))))
        for answer in answers:
            assert not answer.won, (
                f"S1: a slot taken by a skip_reason request can never be won, got {answer}"
            )
            if skips:
                assert answer.outcome is Outcome.SKIPPED and answer.reason == REASON, (
                    f"S1: every claim of a recorded skip answers skipped with its reason, "
                    f"got {answer}"
                )
                assert answer.attempt == 0 and answer.token in (None, request.token), answer
        if harness.capabilities.leases and skips:
            run = await within(harness.raw_run("s1skip", slot))
            assert_skip_record(run, request, REASON, before, after)
        await self.assert_in_history(harness, request, REASON)

    @rule("S1")
    @pytest.mark.asyncio
    async def test_S1_skip_reason_on_a_taken_slot_changes_nothing(
        self, harness: BackendHarness
    ) -> None:
        store = await self.open(harness)
        other = await self.open(harness)
        slot = await self.current_slot(store)
        winner = self.request("s1taken", slot, instance="host:1:0001")
        await self.win(store, winner)
        before = await within(harness.raw_run("s1taken", slot))
        late_skip = self.request("s1taken", slot, instance="host:2:0002", skip_reason=REASON)
        answer = await within(other.claim(late_skip))
        assert not answer.won and answer.outcome is not Outcome.SKIPPED, (
            f"S1: a skip_reason request for a slot that already has a run answers as a claim "
            f"would (not won, not skipped), got {answer}"
        )
        if harness.capabilities.leases:
            assert answer.outcome is Outcome.RUNNING, answer
            assert await within(harness.raw_run("s1taken", slot)) == before, (
                "S1: a skip_reason request changes nothing on a slot that has a run"
            )
        if harness.capabilities.self_recognition:
            again = await within(store.claim(winner))
            assert again.won, f"C2: the winner's resend is still won after a skip, got {again}"

    @rule("S1")
    @pytest.mark.asyncio
    async def test_S1_overlap_is_recorded(self, harness: BackendHarness) -> None:
        require(harness, "leases", "overlap", "skips")
        store = await self.open_lease(harness)
        other = await self.open_lease(harness)
        first = await self.current_slot(store) - 5000
        holder = self.request("s1ovl", first, overlap=Overlap.SKIP)
        await self.win(store, holder)
        skipped = self.request("s1ovl", first + 1000, overlap=Overlap.SKIP, instance="host:2:0002")
        before = await self.now(store)
        answer = await within(store.claim(skipped))
        after = await self.now(store)
        assert answer.outcome is Outcome.SKIPPED and answer.reason.startswith("overlap:"), (
            f"S1: overlap 'skip' while slot {first} holds a live lease records a skip whose "
            f"reason starts with 'overlap:', got {answer}"
        )
        assert f"slot {first}" in answer.reason, (
            f"S1: the overlap reason names the slot holding the lease ({first}): {answer.reason!r}"
        )
        assert answer.attempt == 0 and answer.token in (None, skipped.token), answer
        record = await within(harness.raw_run("s1ovl", skipped.slot))
        assert_skip_record(record, skipped, answer.reason, before, after)
        await self.assert_later_claims_skipped(other, skipped, answer.reason)
        assert await within(store.finish("s1ovl", first, holder.token, RunStatus.SUCCEEDED))
        again = await within(other.claim(self.request("s1ovl", skipped.slot)))
        assert again.outcome is Outcome.SKIPPED, (
            f"S1: the skip stays after the lease holder finished, got {again}"
        )
        for refused in (
            store.renew("s1ovl", skipped.slot, skipped.token, 60_000),
            store.release("s1ovl", skipped.slot, skipped.token),
            store.finish("s1ovl", skipped.slot, skipped.token, RunStatus.SUCCEEDED),
        ):
            assert not await within(refused), (
                "S1: renew, release and finish of a skip record are refused, even with its token"
            )
        assert await within(harness.raw_run("s1ovl", skipped.slot)) == record, (
            "S1: nothing changes a skip record"
        )
        await self.assert_in_history(harness, skipped, answer.reason)

    async def assert_later_claims_skipped(
        self, other: LeaseStore, skipped: ClaimRequest, reason: str
    ) -> None:
        """Every later claim (and `check`) of a recorded skip answers it, whatever it asks."""
        job, slot = skipped.job, skipped.slot
        for what, answer in (
            ("a later claim", await within(other.claim(self.request(job, slot)))),
            (
                "a later claim that is not late",
                await within(other.claim(self.request(job, slot, max_late_ms=3_600_000))),
            ),
            ("a check", await within(other.check(self.request(job, slot)))),
            ("the deciding claim resent", await within(other.claim(skipped))),
        ):
            assert answer.outcome is Outcome.SKIPPED and answer.reason == reason, (
                f"S1: {what} of a recorded skip answers skipped with its reason {reason!r}, "
                f"got {answer}"
            )
            assert answer.attempt == 0 and answer.token in (None, skipped.token), answer
            assert answer.holder in (None, skipped.instance), answer

    @rule("S1")
    @pytest.mark.asyncio
    async def test_S1_late_is_recorded(self, harness: BackendHarness) -> None:
        require(harness, "leases", "skips")
        store = await self.open_lease(harness)
        other = await self.open_lease(harness)
        now = await self.now(store)
        late = self.request(
            "s1late", now - now % 1000 - 70_000, max_late_ms=60_000, instance="host:3:0003"
        )
        before = await self.now(store)
        answer = await within(store.claim(late))
        after = await self.now(store)
        assert answer.outcome is Outcome.SKIPPED and answer.reason.startswith("late:"), (
            f"S1: a slot 70 s old with max_late 60 s, above the job's floor, is recorded as a "
            f"skip whose reason starts with 'late:', got {answer}"
        )
        record = await within(harness.raw_run("s1late", late.slot))
        assert_skip_record(record, late, answer.reason, before, after)
        await self.assert_later_claims_skipped(other, late, answer.reason)
        assert await within(harness.raw_run("s1late", late.slot)) == record
        await self.assert_in_history(harness, late, answer.reason)

    @rule("S1", "L1")
    @pytest.mark.asyncio
    async def test_S1_L1_order_late_then_skip_reason_then_overlap(
        self, harness: BackendHarness
    ) -> None:
        """L1's order for a slot with no run: late before the request's skip_reason before
        overlap, each recorded with its own reason."""
        require(harness, "leases", "overlap", "skips")
        store = await self.open_lease(harness)
        base = await self.current_slot(store)
        holder = self.request("s1order", base - 3000, overlap=Overlap.SKIP)
        await self.win(store, holder)  # a live lease: every later slot of the job overlaps
        for what, request, kind in (
            (
                "late, with a skip_reason, overlapping",
                self.request(
                    "s1order",
                    base - 70_000,
                    max_late_ms=60_000,
                    skip_reason=REASON,
                    overlap=Overlap.SKIP,
                ),
                "late:",
            ),
            (
                "not late, with a skip_reason, overlapping",
                self.request("s1order", base - 2000, skip_reason=REASON, overlap=Overlap.SKIP),
                REASON,
            ),
            (
                "not late, no skip_reason, overlapping",
                self.request("s1order", base - 1000, overlap=Overlap.SKIP),
                "overlap:",
            ),
        ):
            answer = await within(store.claim(request))
            assert answer.outcome is Outcome.SKIPPED and answer.reason.startswith(kind), (
                f"S1/L1: a slot {what} is recorded as a skip whose reason starts with {kind!r} "
                f"(late before skip_reason before overlap), got {answer}"
            )
            run = await within(harness.raw_run("s1order", request.slot))
            assert run is not None and run.error == answer.reason, (
                f"S1: the record keeps the answered reason {answer.reason!r}, got {run}"
            )

    @rule("S1", "C1")
    @pytest.mark.asyncio
    async def test_S1_concurrent_claims_of_a_late_slot_record_one_skip(
        self, harness: BackendHarness
    ) -> None:
        """Many instances claim one late slot at once: one skip is recorded, and every one of
        them is answered with it (its token, holder and reason)."""
        require(harness, "leases", "skips")
        stores = [await self.open_lease(harness) for _ in range(3)]
        now = await self.now(stores[0])
        slot = now - now % 1000 - 120_000
        requests = [self.request("s1race", slot, instance=f"host:{n}:0510") for n in range(12)]
        claims = await within(
            asyncio.gather(*(stores[n % 3].claim(r) for n, r in enumerate(requests))), 60
        )
        seen = {(c.outcome, c.token, c.reason) for c in claims}
        assert len(seen) == 1 and next(iter(seen))[0] is Outcome.SKIPPED, (
            f"S1: {len(requests)} concurrent claims of a late slot record one skip and all "
            f"answer it alike (skipped, one token, one reason), got {sorted(map(str, seen))}"
        )
        run = await within(harness.raw_run("s1race", slot))
        assert run is not None and run.token == claims[0].token, (
            f"S1: the store holds the one skip every claim answered, got {run}"
        )

    @rule("S1", "L11")
    @pytest.mark.asyncio
    async def test_S1_forgotten_slot_is_late_and_writes_nothing(
        self, harness: BackendHarness
    ) -> None:
        require(harness, "leases")
        if harness.capabilities.remembers_ms is not None:
            pytest.skip(
                "not applicable: capability remembers_ms is finite (the store keeps no floor)"
            )
        store = await self.open_lease(harness, history_limit=1, retention_margin_ms=1)
        now = await self.now(store)
        old = self.request("s1gone", now - 50, lease_ms=100, max_late_ms=200, attempts=1)
        await self.win(store, old)
        assert await within(store.finish("s1gone", old.slot, old.token, RunStatus.SUCCEEDED))
        if not await self.forget(harness, store, old):
            pytest.skip(
                f"not applicable: the store kept a run past its retention for "
                f"{FORGET_WITHIN_S} s with history_limit=1, so the floor could not be tested"
            )
        for asking in (
            self.request("s1gone", old.slot, max_late_ms=3_600_000),
            self.request("s1gone", old.slot, max_late_ms=3_600_000, skip_reason=REASON),
            self.request("s1gone", old.slot - 1000, max_late_ms=3_600_000),
        ):
            answer = await within(store.claim(asking))
            assert answer.outcome is Outcome.LATE and answer.reason, (
                f"S1/L11: slot {asking.slot} is at or below the job's floor (its run may have "
                f"happened and was deleted): late with nothing written, got {answer}"
            )
            assert await within(harness.raw_run("s1gone", asking.slot)) is None, (
                f"S1/L11: a forgotten slot writes nothing (no skip record), slot {asking.slot}"
            )

    @rule("S1", "L11")
    @pytest.mark.asyncio
    async def test_S1_L11_a_skip_record_is_forgotten_like_a_run(
        self, harness: BackendHarness
    ) -> None:
        """A skip record is a run for retention: past its horizon and beyond `history_limit` it
        is deleted like any run, and the floor it leaves answers late with nothing written."""
        require(harness, "leases", "skips")
        if harness.capabilities.remembers_ms is not None:
            pytest.skip(
                "not applicable: capability remembers_ms is finite (the store keeps no floor)"
            )
        store = await self.open_lease(harness, history_limit=1, retention_margin_ms=1)
        now = await self.now(store)
        old = self.request("s1skipgone", now - 500, lease_ms=100, max_late_ms=200, attempts=1)
        answer = await within(store.claim(old))
        assert answer.outcome is Outcome.SKIPPED and answer.reason.startswith("late:"), (
            f"S1: a slot 500 ms old with max_late 200 ms is recorded as a late skip, got {answer}"
        )
        if not await self.forget(harness, store, old):
            pytest.skip(
                f"not applicable: the store kept a skip record past its retention for "
                f"{FORGET_WITHIN_S} s with history_limit=1, so the floor could not be tested"
            )
        for asking in (
            self.request("s1skipgone", old.slot, max_late_ms=3_600_000),
            self.request("s1skipgone", old.slot, max_late_ms=3_600_000, skip_reason=REASON),
        ):
            again = await within(store.claim(asking))
            assert again.outcome is Outcome.LATE and again.reason, (
                f"S1/L11: a forgotten skip record leaves the floor at its slot {old.slot}: a "
                f"claim of it is late with nothing written, got {again}"
            )
            assert await within(harness.raw_run("s1skipgone", old.slot)) is None, (
                f"S1/L11: a claim of a forgotten skip's slot writes nothing, slot {old.slot}"
            )

    async def forget(self, harness: BackendHarness, store: LeaseStore, old: ClaimRequest) -> bool:
        """Claim newer slots of the job until the store deleted `old` (L11); False if it did
        not within `FORGET_WITHIN_S`."""
        deadline = time.monotonic() + FORGET_WITHIN_S
        last = old.slot
        while time.monotonic() < deadline:
            last = max(last + 1, await self.now(store) - 10)
            newer = self.request(old.job, last, lease_ms=100, max_late_ms=2_000, attempts=1)
            await self.win(store, newer)
            if await within(harness.raw_run(old.job, old.slot)) is None:
                return True
            await asyncio.sleep(0.05)
        return False
