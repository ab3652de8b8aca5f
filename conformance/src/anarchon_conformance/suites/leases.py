"""L1-L6, L10, L11: the claim table of lease stores, checked against what the store really holds
(the harness backdoors), with lease expiry forced instead of waited for. The records L1 writes
for skipped slots are checked in detail by the ledger suite (S1)."""

from __future__ import annotations

import asyncio

import pytest

from anarchon import Outcome, Overlap, RunStatus

from .._harness import BackendHarness
from .._rules import rule
from ._base import HarnessSuite, require, within

__all__ = ["LeaseTests"]


class LeaseTests(HarnessSuite):
    """The claim step of `anarchon.abc.LeaseStore`, rule by rule."""

    @rule("L1")
    @pytest.mark.asyncio
    async def test_L1_claim_with_no_run_wins_attempt_1(self, harness: BackendHarness) -> None:
        require(harness, "leases")
        store = await self.open_lease(harness)
        slot = await self.current_slot(store)
        request = self.request("l1", slot, lease_ms=30_000, instance="host:1:abcd")
        before = await self.now(store)
        claim = await within(store.claim(request))
        after = await self.now(store)
        assert claim.won and claim.attempt == 1, claim
        assert claim.token in (None, request.token), claim
        run = await within(harness.raw_run("l1", slot))
        assert run is not None, "L1: a won claim must write the run"
        assert run.status is RunStatus.RUNNING and run.attempt == 1, run
        assert run.token == request.token and run.holder == "host:1:abcd", run
        assert run.lease_until is not None
        assert before + 30_000 - 5 <= run.lease_until <= after + 30_000 + 5, (
            f"L1: lease_until must be now + lease_ms ({before}..{after} + 30000), "
            f"got {run.lease_until}"
        )

    @rule("L1")
    @pytest.mark.asyncio
    async def test_L1_late_slot_is_skipped(self, harness: BackendHarness) -> None:
        require(harness, "leases")
        store = await self.open_lease(harness)
        now = await self.now(store)
        for max_late, age in ((60_000, 70_000), (0, 5_000), (1_000, 3_600_000)):
            slot = now - age - now % 1000
            claim = await within(store.claim(self.request("l1late", slot, max_late_ms=max_late)))
            assert claim.outcome is Outcome.SKIPPED and claim.reason.startswith("late:"), (
                f"L1: a slot {age} ms old with max_late {max_late} ms (above the job's floor) "
                f"is skipped, its reason starting with 'late:', got {claim}"
            )
            assert claim.attempt == 0, claim
        fresh = await within(store.claim(self.request("l1late", now - now % 1000 - 2000)))
        assert fresh.won, f"L1: a slot within max_late must be won, got {fresh}"

    @rule("L1")
    @pytest.mark.asyncio
    async def test_L1_overlap_skip_is_skipped_while_another_slot_runs(
        self, harness: BackendHarness
    ) -> None:
        require(harness, "leases", "overlap")
        store = await self.open_lease(harness)
        first = await self.current_slot(store) - 5000
        a = self.request("ovl", first, overlap=Overlap.SKIP)
        await self.win(store, a)
        skipped = await within(store.claim(self.request("ovl", first + 1000, overlap=Overlap.SKIP)))
        assert skipped.outcome is Outcome.SKIPPED and skipped.skip_kind == "overlap", (
            f"L1: overlap 'skip' while slot {first} runs must answer skipped (overlap), "
            f"got {skipped}"
        )
        allowed = self.request("ovl", first + 2000, overlap=Overlap.ALLOW)
        claim = await within(store.claim(allowed))
        assert claim.won, f"L1: overlap 'allow' must win, got {claim}"
        # Once the first run finished, the third one still holds a lease.
        assert await within(store.finish("ovl", first, a.token, RunStatus.SUCCEEDED))
        fourth = first + 3000
        refused = await within(store.claim(self.request("ovl", fourth, overlap=Overlap.SKIP)))
        assert refused.outcome is Outcome.SKIPPED, (
            f"L1: slot {allowed.slot} still holds a lease: {refused}"
        )
        assert f"slot {allowed.slot}" in refused.reason, (
            f"L1: the reason names the slot that holds the lease ({allowed.slot}): {refused}"
        )
        await within(harness.force_expire("ovl", allowed.slot))
        free = await within(store.claim(self.request("ovl", fourth + 1000, overlap=Overlap.SKIP)))
        assert free.won, f"L1: an expired lease does not block 'skip', got {free}"

    @rule("L2")
    @pytest.mark.asyncio
    async def test_L2_same_token_changes_nothing(self, harness: BackendHarness) -> None:
        require(harness, "leases")
        store = await self.open_lease(harness)
        slot = await self.current_slot(store)
        request = self.request("l2", slot)
        await self.win(store, request)
        before = await within(harness.raw_run("l2", slot))
        again = await within(store.claim(request))
        assert again.won and again.attempt == 1, again
        assert await within(harness.raw_run("l2", slot)) == before, "L2: nothing changes"

    @rule("L3")
    @pytest.mark.asyncio
    async def test_L3_other_token_sees_running(self, harness: BackendHarness) -> None:
        require(harness, "leases")
        store = await self.open_lease(harness)
        other = await self.open_lease(harness)
        slot = await self.current_slot(store)
        request = self.request("l3", slot, instance="host:1:0001")
        await self.win(store, request)
        before = await within(harness.raw_run("l3", slot))
        claim = await within(other.claim(self.request("l3", slot, instance="host:2:0002")))
        assert claim.outcome is Outcome.RUNNING, f"L3: a live lease is running, got {claim}"
        assert claim.attempt == 1, claim
        assert claim.holder in (None, "host:1:0001"), claim
        assert await within(harness.raw_run("l3", slot)) == before, "L3: nothing changes"

    @rule("L4")
    @pytest.mark.asyncio
    async def test_L4_takeover_after_expiry(self, harness: BackendHarness) -> None:
        require(harness, "leases")
        store = await self.open_lease(harness)
        slot = await self.current_slot(store)
        old = self.request("l4", slot)
        await self.win(store, old)
        await within(harness.force_expire("l4", slot))
        new = self.request("l4", slot, instance="host:9:0009")
        claim = await within(store.claim(new))
        assert claim.won and claim.attempt == 2, f"L4: takeover must win attempt 2, got {claim}"
        run = await within(harness.raw_run("l4", slot))
        assert run is not None and run.status is RunStatus.RUNNING, run
        assert (run.attempt, run.token, run.holder) == (2, new.token, "host:9:0009"), run
        assert run.lease_until is not None and run.lease_until >= await self.now(store)
        stale = await within(store.claim(old))
        assert stale.outcome is Outcome.RUNNING, f"the old token lost the run, got {stale}"

    @rule("L4")
    @pytest.mark.asyncio
    async def test_L4_takeover_ignores_lateness(self, harness: BackendHarness) -> None:
        require(harness, "leases")
        store = await self.open_lease(harness)
        slot = await self.current_slot(store) - 30_000
        await self.win(store, self.request("l4late", slot, max_late_ms=600_000))
        await within(harness.force_expire("l4late", slot))
        claim = await within(store.claim(self.request("l4late", slot, max_late_ms=0)))
        assert claim.won and claim.attempt == 2, f"L4: lateness does not apply, got {claim}"

    @rule("L5")
    @pytest.mark.asyncio
    async def test_L5_no_attempts_left_is_interrupted(self, harness: BackendHarness) -> None:
        require(harness, "leases")
        store = await self.open_lease(harness)
        slot = await self.current_slot(store)
        await self.win(store, self.request("l5", slot, attempts=2))
        await within(harness.force_expire("l5", slot))
        last = self.request("l5", slot, attempts=2)
        assert (await within(store.claim(last))).attempt == 2
        await within(harness.force_expire("l5", slot))
        claim = await within(store.claim(self.request("l5", slot, attempts=2)))
        assert claim.outcome is Outcome.DONE, f"L5: no attempts left is done, got {claim}"
        run = await within(harness.raw_run("l5", slot))
        assert run is not None and run.status is RunStatus.INTERRUPTED, run
        assert run.attempt == 2, run
        later = await within(store.claim(self.request("l5", slot, attempts=5)))
        assert later.outcome is Outcome.DONE, f"L6: an interrupted run stays done, got {later}"
        if harness.capabilities.fencing:
            assert not await within(store.finish("l5", slot, last.token, RunStatus.SUCCEEDED)), (
                "L8/L5: the last holder's finish of a run marked interrupted is refused (fenced)"
            )
            assert await within(harness.raw_run("l5", slot)) == run, (
                "L8: a refused finish writes nothing"
            )

    @rule("L6")
    @pytest.mark.asyncio
    @pytest.mark.parametrize("status", [RunStatus.SUCCEEDED, RunStatus.FAILED])
    async def test_L6_finished_is_done_for_every_token(
        self, harness: BackendHarness, status: RunStatus
    ) -> None:
        require(harness, "leases")
        store = await self.open_lease(harness)
        slot = await self.current_slot(store)
        request = self.request("l6", slot)
        await self.win(store, request)
        assert await within(store.finish("l6", slot, request.token, status, "boom"))
        for asking in (request, self.request("l6", slot), self.request("l6", slot, attempts=9)):
            claim = await within(store.claim(asking))
            assert claim.outcome is Outcome.DONE, f"L6: a finished run is done, got {claim}"
        run = await within(harness.raw_run("l6", slot))
        assert run is not None and run.status is status, run

    @rule("L10")
    @pytest.mark.asyncio
    async def test_L10_check_reads_then_claims_only_an_expired_lease(
        self, harness: BackendHarness
    ) -> None:
        require(harness, "leases")
        store = await self.open_lease(harness)
        backup = await self.open_lease(harness)
        slot = await self.current_slot(store)
        request = self.request("l10", slot)
        await self.win(store, request)
        before = await within(harness.raw_run("l10", slot))
        polled = await within(backup.check(self.request("l10", slot)))
        assert polled.outcome is Outcome.RUNNING, f"L10: a live lease is running, got {polled}"
        own = await within(store.check(request))
        assert own.won and own.attempt == 1, (
            f"L10/L2: the holder's own check (same token) is won, attempt 1, got {own}"
        )
        assert await within(harness.raw_run("l10", slot)) == before, (
            "L10: a check of a live lease writes nothing"
        )
        await within(harness.force_expire("l10", slot))
        mine = self.request("l10", slot)
        taken = await within(backup.check(mine))
        assert taken.won and taken.attempt == 2, f"L10: an expired lease is taken over, got {taken}"
        assert await within(backup.finish("l10", slot, mine.token, RunStatus.SUCCEEDED))
        done = await within(store.check(self.request("l10", slot)))
        assert done.outcome is Outcome.DONE, f"L10: a finished run is done, got {done}"
        fresh = await within(backup.check(self.request("l10", slot + 1000)))
        assert fresh.won, f"L10: a missing run goes through the claim step, got {fresh}"

    @rule("L10", "L5")
    @pytest.mark.asyncio
    async def test_L10_check_of_an_expired_last_attempt_is_done(
        self, harness: BackendHarness
    ) -> None:
        require(harness, "leases")
        store = await self.open_lease(harness)
        backup = await self.open_lease(harness)
        slot = await self.current_slot(store)
        await self.win(store, self.request("l10last", slot, attempts=1))
        await within(harness.force_expire("l10last", slot))
        claim = await within(backup.check(self.request("l10last", slot, attempts=1)))
        assert claim.outcome is Outcome.DONE and claim.attempt == 1, (
            f"L10/L5: a check of a run whose last attempt's lease ran out goes through the claim "
            f"step, which marks it interrupted: done, attempt 1, got {claim}"
        )
        run = await within(harness.raw_run("l10last", slot))
        assert run is not None and run.status is RunStatus.INTERRUPTED, (
            f"L10/L5: the store marks the run interrupted, it holds {run}"
        )

    @rule("L11")
    @pytest.mark.asyncio
    async def test_L11_a_live_lease_is_never_forgotten(self, harness: BackendHarness) -> None:
        """Past its retention horizon, with newer runs beyond `history_limit`, a run whose lease
        was renewed and is still live stays: its runner still runs it."""
        require(harness, "leases")
        store = await self.open_lease(harness, history_limit=1, retention_margin_ms=1)
        now = await self.now(store)
        old = self.request("l11live", now - 50, lease_ms=100, max_late_ms=200, attempts=1)
        await self.win(store, old)
        assert await within(store.renew("l11live", old.slot, old.token, 60_000)), (
            "L7: the holder renews its lease"
        )
        horizon = old.slot + 200 + 100 + 1
        for _ in range(100):  # until the store's clock passed the horizon (5 s at most)
            if await self.now(store) > horizon:
                break
            await asyncio.sleep(0.05)
        for n in range(3):
            newer = await self.now(store) - 10 + n
            await self.win(
                store,
                self.request("l11live", newer, lease_ms=100, max_late_ms=2_000, attempts=1),
            )
        run = await within(harness.raw_run("l11live", old.slot))
        assert run is not None and run.status is RunStatus.RUNNING and run.token == old.token, (
            f"L11: a run past its retention horizon whose lease is live (renewed) is never "
            f"forgotten, the store holds {run}"
        )
        other = await within(store.claim(self.request("l11live", old.slot, max_late_ms=600_000)))
        assert other.outcome is Outcome.RUNNING, (
            f"L11/L3: the live lease still answers running, got {other}"
        )

    @rule("L11")
    @pytest.mark.asyncio
    async def test_L11_run_kept_until_its_horizon(self, harness: BackendHarness) -> None:
        require(harness, "leases")
        store = await self.open_lease(harness, history_limit=1, retention_margin_ms=1)
        base = await self.current_slot(store)
        first = self.request("l11", base - 10_000)
        await self.win(store, first)
        assert await within(store.finish("l11", first.slot, first.token, RunStatus.SUCCEEDED))
        for n in range(1, 6):
            await self.win(store, self.request("l11", base - 10_000 + n * 1000))
        run = await within(harness.raw_run("l11", first.slot))
        assert run is not None and run.status is RunStatus.SUCCEEDED, (
            f"L11: a run is kept until slot + max_late + attempts * lease, got {run}"
        )
        again = await within(store.claim(self.request("l11", first.slot)))
        assert again.outcome is Outcome.DONE, again

    @rule("L11")
    @pytest.mark.asyncio
    async def test_L11_history_newest_first(self, harness: BackendHarness) -> None:
        require(harness, "history")
        store = await self.open(harness)
        base = await self.current_slot(store)
        slots = [base - 3000, base - 1000, base - 2000]
        if harness.claims_in_slot_order:
            slots.sort()
        for slot in slots:
            await self.win(store, self.request("hist", slot))
        runs = await within(store.history("hist", 2))
        assert [r.slot for r in runs] == [base - 1000, base - 2000], runs
        assert all(r.job == "hist" for r in runs)
