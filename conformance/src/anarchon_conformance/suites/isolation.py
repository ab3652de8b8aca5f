"""ISO: runs of one job never affect another job, and one prefix never sees another's runs."""

from __future__ import annotations

import pytest

from anarchon import LeaseStore, Outcome, Overlap, RunStatus

from .._harness import BackendHarness
from .._rules import rule
from ._base import HarnessSuite, within

__all__ = ["IsolationTests"]


class IsolationTests(HarnessSuite):
    """Jobs and prefixes are separate namespaces in one store."""

    @rule("ISO")
    @pytest.mark.asyncio
    async def test_ISO_jobs_are_independent(self, harness: BackendHarness) -> None:
        store = await self.open(harness)
        slot = await self.current_slot(store)
        a = self.request("iso-a", slot, overlap=Overlap.SKIP)
        await self.win(store, a)
        b = self.request("iso_b", slot, overlap=Overlap.SKIP)
        claim = await within(store.claim(b))
        assert claim.won, f"ISO: job iso_b is not job iso-a, got {claim}"
        c = await within(store.claim(self.request("iso-c", slot + 1000, overlap=Overlap.SKIP)))
        assert c.won, f"ISO: another job's live lease is no overlap, got {c}"
        if isinstance(store, LeaseStore) and harness.capabilities.leases:
            assert not await within(store.finish("iso_b", slot, a.token, RunStatus.SUCCEEDED)), (
                "ISO: job iso-a's token must not finish job iso_b's run of the same slot"
            )
            assert await within(store.finish("iso-a", slot, a.token, RunStatus.SUCCEEDED)), (
                "ISO: job iso-a's holder finishes its own run"
            )
            run = await within(harness.raw_run("iso_b", slot))
            assert run is not None and run.status is RunStatus.RUNNING and run.token == b.token, (
                f"ISO: finishing iso-a left job iso_b's run running with its own token, got {run}"
            )
            await within(harness.force_expire("iso_b", slot))
            assert (await within(harness.raw_run("iso-c", slot + 1000))) is not None, (
                "ISO: job iso-c's run must still be there after iso_b's lease was expired"
            )
            again = await within(store.claim(self.request("iso-c", slot + 1000)))
            assert again.outcome is Outcome.RUNNING, f"ISO: expiring iso_b touched iso-c: {again}"

    @rule("ISO")
    @pytest.mark.asyncio
    async def test_ISO_prefixes_are_independent(self, harness: BackendHarness) -> None:
        one = await self.open(harness, prefix="isoone")
        two = await self.open(harness, prefix="isotwo")
        slot = await self.current_slot(one)
        first = self.request("job", slot)
        second = self.request("job", slot)
        await self.win(one, first)
        claim = await within(two.claim(second))
        assert claim.won, f"ISO: prefix isotwo must not see prefix isoone's run, got {claim}"
        if harness.capabilities.leases:
            run_one = await within(harness.raw_run("job", slot, prefix="isoone"))
            run_two = await within(harness.raw_run("job", slot, prefix="isotwo"))
            assert run_one is not None and run_one.token == first.token, (
                f"ISO: prefix isoone holds its own winner's run, got {run_one}"
            )
            assert run_two is not None and run_two.token == second.token, (
                f"ISO: prefix isotwo holds its own winner's run, got {run_two}"
            )
            await within(harness.force_expire("job", slot, prefix="isoone"))
            still = await within(two.claim(self.request("job", slot)))
            assert still.outcome is Outcome.RUNNING, f"ISO: expiry crossed prefixes: {still}"
        if harness.capabilities.history:
            runs = await within(one.history("job"))
            assert [r.token for r in runs] == [first.token], (
                f"ISO: the history of prefix isoone shows only its own run, got {runs}"
            )
