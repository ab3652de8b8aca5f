"""SETUP: setting jobs up at a scheduler's start (`anarchon.abc.SupportsJobSetup`) decides
nothing. It writes no run, whoever claims first still wins, and setting up again, before or after
the claims, changes no outcome; a job nobody set up is still claimed (callers without a
scheduler)."""

from __future__ import annotations

import pytest

from anarchon import ClaimStore, SupportsJobSetup

from .._harness import BackendHarness
from .._rules import rule
from ._base import NOT_WON, HarnessSuite, optional, within

__all__ = ["SetupTests"]


def setter(store: ClaimStore) -> SupportsJobSetup:
    what = "the store sets no jobs up at start"
    return optional(store, SupportsJobSetup, what)  # type: ignore[type-abstract]  # a Protocol


class SetupTests(HarnessSuite):
    """Only for stores that implement `SupportsJobSetup`; not applicable elsewhere."""

    @rule("SETUP")
    @pytest.mark.asyncio
    async def test_SETUP_setting_jobs_up_decides_nothing(self, harness: BackendHarness) -> None:
        store = await self.open(harness)
        other = await self.open(harness)
        slot = await self.current_slot(store)
        jobs = ["setup-a", "setup-b"]
        await within(setter(store).setup_jobs(jobs))
        await within(setter(store).setup_jobs(jobs))  # twice: no harm
        for job in jobs:
            assert await within(harness.raw_run(job, slot)) is None, (
                f"SETUP: setting {job} up wrote a run: setting up is not a claim"
            )
        # Whoever claims first wins, whoever set the job up.
        won = await within(other.claim(self.request("setup-a", slot, instance="o:1:0")))
        assert won.won, f"SETUP: a job set up by one instance must be claimable by any: {won}"
        lost = await within(store.claim(self.request("setup-a", slot)))
        assert lost.outcome in NOT_WON, f"SETUP: setting up gave the setter a won run: {lost}"
        # Setting up again after the claims changes no outcome.
        await within(setter(other).setup_jobs(jobs))
        again = await within(store.claim(self.request("setup-a", slot, instance="s:1:1")))
        assert again.outcome in NOT_WON, f"SETUP: setting up again reopened the run: {again}"
        await self.win(store, self.request("setup-b", slot))
        # A job nobody set up is claimed as usual.
        await self.win(other, self.request("setup-never", slot))
