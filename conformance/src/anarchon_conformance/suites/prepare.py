"""PREP: preparing a slot ahead (`anarchon.abc.SupportsPrepare`) decides nothing. Claims of a
prepared slot answer as they would without it, for every token, and the store still remembers
each run as long as its capabilities say (T3), counted from the claim, not the preparation."""

from __future__ import annotations

import asyncio
import collections

import pytest

from anarchon import Claim, ClaimStore, Outcome, SupportsPrepare

from .._harness import BackendHarness
from .._rules import rule
from ._base import NOT_WON, HarnessSuite, memory_max_late_ms, optional, within
from .memory_rule import BUDGET_MS

__all__ = ["PrepareTests"]


def preparer(store: ClaimStore) -> SupportsPrepare:
    what = "the store does not prepare slots ahead"
    return optional(store, SupportsPrepare, what)  # type: ignore[type-abstract]  # a Protocol


class PrepareTests(HarnessSuite):
    """Only for stores that implement `SupportsPrepare`; not applicable elsewhere. Slots are
    prepared a second ahead and claimed once they have come, as the scheduler does."""

    async def future_slot(self, store: ClaimStore, ahead_ms: int = 1000) -> int:
        return await self.current_slot(store) + 1000 + ahead_ms

    async def until(self, store: ClaimStore, at_ms: int) -> None:
        delay = at_ms - await self.now(store)
        if delay > 0:
            await asyncio.sleep(delay / 1000)

    @rule("PREP")
    @pytest.mark.asyncio
    async def test_PREP_preparing_decides_nothing(self, harness: BackendHarness) -> None:
        store = await self.open(harness)
        other = await self.open(harness)
        assert preparer(store).prepare_ahead_ms >= 0
        slot = await self.future_slot(store)
        jobs = ["prep-a", "prep-b", "prep-c"]
        await within(preparer(store).prepare(jobs, slot))
        await within(preparer(store).prepare(jobs, slot))  # twice: no harm
        for job in jobs:
            assert await within(harness.raw_run(job, slot)) is None, (
                f"PREP: preparing wrote a run of {job}: a preparation is not a claim"
            )
        await self.until(store, slot)
        # Whoever claims first wins, whoever prepared.
        won = await within(other.claim(self.request("prep-a", slot, instance="o:1:0")))
        assert won.won, f"PREP: a prepared slot must be claimable by anyone: {won}"
        lost = await within(store.claim(self.request("prep-a", slot)))
        assert lost.outcome in NOT_WON, f"PREP: preparing gave the preparer a won run: {lost}"
        await self.win(store, self.request("prep-b", slot))
        # Preparing again after the claims changes no outcome.
        await within(preparer(other).prepare(jobs, slot))
        for job in ("prep-a", "prep-b"):
            again = await within(other.claim(self.request(job, slot, instance="o:1:1")))
            assert again.outcome in NOT_WON, f"PREP: a preparation reopened run {job}: {again}"
            assert await within(harness.raw_run(job, slot)) is not None
        assert await within(harness.raw_run("prep-c", slot)) is None
        await self.win(other, self.request("prep-c", slot))

    @rule("PREP", "C1")
    @pytest.mark.asyncio
    async def test_PREP_C1_preparations_racing_claims(self, harness: BackendHarness) -> None:
        stores = [await self.open(harness) for _ in range(3)]
        slot = await self.current_slot(stores[0])
        jobs = [f"prep-race-{n}" for n in range(4)]
        requests = [
            self.request(job, slot, instance=f"host:{i}:0000") for job in jobs for i in range(6)
        ]
        preparations = [preparer(s).prepare(jobs, slot) for s in stores for _ in range(2)]
        claims = [stores[n % 3].claim(r) for n, r in enumerate(requests)]
        results = await within(asyncio.gather(*preparations, *claims), 60)
        winners: collections.Counter[str] = collections.Counter()
        for request, claim in zip(requests, results[len(preparations) :], strict=True):
            assert isinstance(claim, Claim) and claim.outcome is not Outcome.LATE, claim
            winners[request.job] += claim.won
        for job in jobs:
            assert winners[job] == 1, f"C1 with preparations: {winners[job]} winners of {job}"

    @rule("PREP", "T3")
    @pytest.mark.asyncio
    async def test_PREP_T3_memory_counts_from_the_claim(self, harness: BackendHarness) -> None:
        """Prepared well before its claim, a run is still remembered remembers_ms after the
        claim (sampled within the kit's time budget)."""
        store = await self.open(harness)
        caps = harness.capabilities
        horizon = caps.remembers_ms if caps.remembers_ms is not None else 1_000
        slot = await self.future_slot(store, min(horizon // 2, 1_000))
        await within(preparer(store).prepare(["prep-t3"], slot))
        await self.until(store, slot)
        await self.win(store, self.request("prep-t3", slot, max_late_ms=300))
        await self.until(store, await self.now(store) + min(horizon, BUDGET_MS) - 100)
        asking = memory_max_late_ms(caps)
        again = await within(store.claim(self.request("prep-t3", slot, max_late_ms=asking)))
        assert not again.won, (
            f"T3: the store forgot a prepared run it must remember (remembers_ms="
            f"{caps.remembers_ms}) and let another token win it: {again}"
        )
