"""L7-L9 (renew, finish and release compare tokens), F2 (fencing tokens grow), and the F1
placeholder: self-fencing is the runner's job and is certified once the runtime exists."""

from __future__ import annotations

import pytest

from anarchon import Outcome, RunStatus, fencing_token

from .._harness import BackendHarness
from .._rules import rule
from ._base import HarnessSuite, require, within

__all__ = ["FencingTests"]


class FencingTests(HarnessSuite):
    """A taken-over runner is fenced out: everything it sends with its old token is refused."""

    @rule("L7")
    @pytest.mark.asyncio
    async def test_L7_renew_only_with_the_holding_token(self, harness: BackendHarness) -> None:
        require(harness, "leases", "fencing")
        store = await self.open_lease(harness)
        slot = await self.current_slot(store)
        old = self.request("l7", slot, lease_ms=10_000)
        assert (await within(store.claim(old))).won
        before = await within(harness.raw_run("l7", slot))
        assert before is not None and before.lease_until is not None
        stranger = self.request("l7", slot).token
        assert not await within(store.renew("l7", slot, stranger, 600_000)), (
            "L7: renew with a token that does not hold the run must be False"
        )
        assert await within(harness.raw_run("l7", slot)) == before, (
            "L7: a refused renew writes nothing"
        )
        assert await within(store.renew("l7", slot, old.token, 600_000)), "L7: the holder renews"
        renewed = await within(harness.raw_run("l7", slot))
        assert renewed is not None and renewed.lease_until is not None
        assert renewed.lease_until >= before.lease_until + 500_000, (
            f"L7: renew sets lease_until = now + lease_ms, got {renewed.lease_until}"
        )
        await within(harness.force_expire("l7", slot))
        new = self.request("l7", slot)
        assert (await within(store.claim(new))).won
        assert not await within(store.renew("l7", slot, old.token, 600_000)), (
            "L7: the taken-over runner's renew must be refused"
        )
        assert await within(store.finish("l7", slot, new.token, RunStatus.SUCCEEDED))
        assert not await within(store.renew("l7", slot, new.token, 600_000)), (
            "L7: a finished run cannot be renewed"
        )
        assert not await within(store.renew("l7", slot + 1000, new.token, 600_000)), (
            "L7: renewing a run that does not exist is False"
        )

    @rule("L8")
    @pytest.mark.asyncio
    async def test_L8_finish_only_with_the_holding_token(self, harness: BackendHarness) -> None:
        require(harness, "leases", "fencing")
        store = await self.open_lease(harness)
        slot = await self.current_slot(store)
        old = self.request("l8", slot)
        assert (await within(store.claim(old))).won
        stranger = self.request("l8", slot).token
        assert not await within(store.finish("l8", slot, stranger, RunStatus.SUCCEEDED))
        run = await within(harness.raw_run("l8", slot))
        assert run is not None and run.status is RunStatus.RUNNING, (
            "L8: a refused finish writes nothing"
        )
        await within(harness.force_expire("l8", slot))
        new = self.request("l8", slot)
        assert (await within(store.claim(new))).won
        assert not await within(store.finish("l8", slot, old.token, RunStatus.SUCCEEDED)), (
            "L8: the taken-over runner's finish must be refused (fenced)"
        )
        run = await within(harness.raw_run("l8", slot))
        assert run is not None and run.status is RunStatus.RUNNING, run
        assert await within(store.finish("l8", slot, new.token, RunStatus.FAILED, "it broke"))
        run = await within(harness.raw_run("l8", slot))
        assert run is not None and run.status is RunStatus.FAILED, run
        assert run.error == "it broke" and run.attempt == 2 and run.token == new.token, run
        assert not await within(store.finish("l8", slot, new.token, RunStatus.SUCCEEDED)), (
            "L8: a run is finished once"
        )

    @rule("L9")
    @pytest.mark.asyncio
    async def test_L9_release_only_with_the_holding_token(self, harness: BackendHarness) -> None:
        require(harness, "leases", "fencing")
        store = await self.open_lease(harness)
        backup = await self.open_lease(harness)
        slot = await self.current_slot(store)
        holder = self.request("l9", slot)
        assert (await within(store.claim(holder))).won
        stranger = self.request("l9", slot).token
        assert not await within(store.release("l9", slot, stranger)), (
            "L9: a stranger cannot release"
        )
        assert (await within(backup.claim(self.request("l9", slot)))).outcome is Outcome.RUNNING
        assert await within(store.release("l9", slot, holder.token)), "L9: the holder releases"
        taken = await within(backup.check(self.request("l9", slot)))
        assert taken.won and taken.attempt == 2, f"L9: a backup takes over at once, got {taken}"
        assert not await within(store.release("l9", slot, holder.token)), (
            "L9: the old holder can no longer release"
        )

    @rule("F1")
    def test_F1_self_fencing_runner(self) -> None:
        pytest.skip("not applicable (needs runtime): F1 is the runner's self-fencing")

    @rule("F2")
    @pytest.mark.asyncio
    async def test_F2_fencing_token_grows_with_slot_and_attempt(
        self, harness: BackendHarness
    ) -> None:
        require(harness, "leases", "fencing")
        store = await self.open_lease(harness)
        base = await self.current_slot(store)
        seen: list[int] = []
        for slot in (base - 2000, base - 1000):
            for attempt in (1, 2, 3):
                if attempt > 1:
                    await within(harness.force_expire("f2", slot))
                claim = await within(store.claim(self.request("f2", slot)))
                assert claim.won and claim.attempt == attempt, claim
                run = await within(harness.raw_run("f2", slot))
                assert run is not None and run.attempt == attempt, run
                assert run.fencing_token == fencing_token(slot, attempt)
                seen.append(run.fencing_token)
        assert seen == sorted(set(seen)), f"F2: fencing tokens must grow strictly: {seen}"
