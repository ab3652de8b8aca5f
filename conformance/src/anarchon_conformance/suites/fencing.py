"""L7-L9 (renew, finish and release compare tokens), F1 (the runtime's runner fences itself
with this store) and F2 (fencing tokens grow)."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable
from contextlib import AbstractAsyncContextManager

import pytest

import anarchon
from anarchon import ClaimStore, Fenced, Outcome, Run, RunStatus, fencing_token

from .._harness import BackendHarness
from .._rules import rule
from ..proxy import FaultProxy
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
        await self.win(store, old)
        before = await within(harness.raw_run("l7", slot))
        assert before is not None and before.lease_until is not None, (
            f"L7: a won claim writes a run with a lease, the store holds {before}"
        )
        stranger = self.request("l7", slot).token
        assert not await within(store.renew("l7", slot, stranger, 600_000)), (
            "L7: renew with a token that does not hold the run must be False"
        )
        assert await within(harness.raw_run("l7", slot)) == before, (
            "L7: a refused renew writes nothing"
        )
        assert await within(store.renew("l7", slot, old.token, 600_000)), "L7: the holder renews"
        renewed = await within(harness.raw_run("l7", slot))
        assert renewed is not None and renewed.lease_until is not None, (
            f"L7: a renewed run keeps its lease, the store holds {renewed}"
        )
        assert renewed.lease_until >= before.lease_until + 500_000, (
            f"L7: renew sets lease_until = now + lease_ms, got {renewed.lease_until}"
        )
        await within(harness.force_expire("l7", slot))
        new = self.request("l7", slot)
        await self.win(store, new)
        assert not await within(store.renew("l7", slot, old.token, 600_000)), (
            "L7: the taken-over runner's renew must be refused"
        )
        assert await within(store.finish("l7", slot, new.token, RunStatus.SUCCEEDED)), (
            "L8: the holder's finish must be True"
        )
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
        await self.win(store, old)
        stranger = self.request("l8", slot).token
        assert not await within(store.finish("l8", slot, stranger, RunStatus.SUCCEEDED)), (
            "L8: a finish with a token that does not hold the run must be False"
        )
        run = await within(harness.raw_run("l8", slot))
        assert run is not None and run.status is RunStatus.RUNNING, (
            "L8: a refused finish writes nothing"
        )
        await within(harness.force_expire("l8", slot))
        new = self.request("l8", slot)
        await self.win(store, new)
        assert not await within(store.finish("l8", slot, old.token, RunStatus.SUCCEEDED)), (
            "L8: the taken-over runner's finish must be refused (fenced)"
        )
        run = await within(harness.raw_run("l8", slot))
        assert run is not None and run.status is RunStatus.RUNNING, (
            f"L8: a refused finish writes nothing, the store holds {run}"
        )
        assert await within(store.finish("l8", slot, new.token, RunStatus.FAILED, "it broke")), (
            "L8: the finish of the holder after a takeover must be True"
        )
        run = await within(harness.raw_run("l8", slot))
        assert run is not None and run.status is RunStatus.FAILED, (
            f"L8: the holder's finish writes its status (failed), the store holds {run}"
        )
        assert run.error == "it broke" and run.attempt == 2 and run.token == new.token, (
            f"L8: the finished run keeps the error, attempt 2 and the holder's token: {run}"
        )
        assert not await within(store.finish("l8", slot, new.token, RunStatus.SUCCEEDED)), (
            "L8: a run is finished once"
        )

    @rule("L8")
    @pytest.mark.asyncio
    async def test_L8_finish_needs_a_final_status(self, harness: BackendHarness) -> None:
        """finish records succeeded, failed or interrupted; running or skipped is refused (a
        `ValueError`, or False) and writes nothing."""
        require(harness, "leases", "fencing")
        store = await self.open_lease(harness)
        slot = await self.current_slot(store)
        request = self.request("l8status", slot)
        await self.win(store, request)
        before = await within(harness.raw_run("l8status", slot))
        for status in (RunStatus.RUNNING, RunStatus.SKIPPED):
            try:
                answer = await within(store.finish("l8status", slot, request.token, status))
            except ValueError:
                continue
            assert not answer, f"L8: finish with status {status} (not final) must be refused"
        assert await within(harness.raw_run("l8status", slot)) == before, (
            "L8: a finish with a status that is not final writes nothing"
        )

    @rule("L8")
    @pytest.mark.asyncio
    @pytest.mark.parametrize("status", [RunStatus.SUCCEEDED, RunStatus.FAILED])
    async def test_L8_C2_resent_finish_is_true_and_changes_nothing(
        self, harness: BackendHarness, status: RunStatus
    ) -> None:
        """C2 for finish: a finish resent after its first answer was lost (same token, same
        status) is True again and writes nothing; any other finish of a finished run is False."""
        require(harness, "leases", "fencing")
        store = await self.open_lease(harness)
        other = await self.open_lease(harness)
        slot = await self.current_slot(store)
        request = self.request("l8c2", slot)
        await self.win(store, request)
        assert await within(store.finish("l8c2", slot, request.token, status, "first")), (
            "L8: the holder's finish must be True"
        )
        done = await within(harness.raw_run("l8c2", slot))
        assert done is not None and done.status is status and done.error == "first", (
            f"L8: the finish writes status {status} and its error, the store holds {done}"
        )
        for resent_by in (store, other):
            assert await within(resent_by.finish("l8c2", slot, request.token, status, "first")), (
                f"L8/C2: a finish resent with the same token and status ({status}) must be True "
                "again: its first answer may have been lost, and False reads as fenced"
            )
        assert await within(store.finish("l8c2", slot, request.token, status, "other text")), (
            "L8/C2: a resent finish is recognised by token and status"
        )
        assert await within(harness.raw_run("l8c2", slot)) == done, (
            "L8/C2: a resent finish writes nothing (not finished_at, not the error)"
        )
        flipped = RunStatus.FAILED if status is RunStatus.SUCCEEDED else RunStatus.SUCCEEDED
        for token, finish_status, what in (
            (request.token, flipped, f"another status ({flipped}) after finishing"),
            (request.token, RunStatus.INTERRUPTED, "interrupted after finishing"),
            (self.request("l8c2", slot).token, status, "another token, the same status"),
        ):
            assert not await within(store.finish("l8c2", slot, token, finish_status)), (
                f"L8: a finish with {what} must be False (the run finished once)"
            )
        assert await within(harness.raw_run("l8c2", slot)) == done, (
            "L8: a refused finish writes nothing"
        )

    @rule("L8")
    @pytest.mark.asyncio
    async def test_L8_C2_resent_finish_after_takeover_is_fenced(
        self, harness: BackendHarness
    ) -> None:
        """The runner taken over resends its finish: still False, however often; the new
        holder's finish, resent, still True."""
        require(harness, "leases", "fencing")
        store = await self.open_lease(harness)
        slot = await self.current_slot(store)
        old = self.request("l8c2t", slot)
        await self.win(store, old)
        await within(harness.force_expire("l8c2t", slot))
        new = self.request("l8c2t", slot)
        await self.win(store, new)
        assert await within(store.finish("l8c2t", slot, new.token, RunStatus.SUCCEEDED)), (
            "L8: the new holder's finish must be True"
        )
        for _ in range(2):
            assert not await within(store.finish("l8c2t", slot, old.token, RunStatus.SUCCEEDED)), (
                "L8: the taken-over runner's finish stays fenced, even with the winner's status"
            )
            assert await within(store.finish("l8c2t", slot, new.token, RunStatus.SUCCEEDED)), (
                "L8/C2: the new holder's finish, resent, must be True again"
            )
        run = await within(harness.raw_run("l8c2t", slot))
        assert run is not None and run.attempt == 2 and run.token == new.token, (
            f"L8: the run stays the new holder's (attempt 2), the store holds {run}"
        )

    @rule("L8")
    @pytest.mark.asyncio
    async def test_L8_C2_concurrent_resends_of_one_finish_are_true(
        self, harness: BackendHarness
    ) -> None:
        """The runtime resends a finish whose answer it did not hear while the first is still on
        its way: both arrive together, and both must be True (one writes, one is its resend)."""
        require(harness, "leases", "fencing")
        first = await self.open_lease(harness)
        second = await self.open_lease(harness)
        slot = await self.current_slot(first)
        for n in range(5):
            request = self.request(f"l8both{n}", slot)
            await self.win(first, request)
            answers = await within(
                asyncio.gather(
                    first.finish(request.job, slot, request.token, RunStatus.SUCCEEDED),
                    second.finish(request.job, slot, request.token, RunStatus.SUCCEEDED),
                )
            )
            assert list(answers) == [True, True], (
                f"L8/C2: two concurrent finishes with the holder's token and one status must both "
                f"be True (one writes, the other is its resend), got {answers}"
            )

    @rule("L9")
    @pytest.mark.asyncio
    async def test_L9_release_only_with_the_holding_token(self, harness: BackendHarness) -> None:
        require(harness, "leases", "fencing")
        store = await self.open_lease(harness)
        backup = await self.open_lease(harness)
        slot = await self.current_slot(store)
        holder = self.request("l9", slot)
        await self.win(store, holder)
        stranger = self.request("l9", slot).token
        assert not await within(store.release("l9", slot, stranger)), (
            "L9: a stranger cannot release"
        )
        held = await within(backup.claim(self.request("l9", slot)))
        assert held.outcome is Outcome.RUNNING, (
            f"L9/L3: after a refused release the lease is still live: running, got {held}"
        )
        assert await within(store.release("l9", slot, holder.token)), "L9: the holder releases"
        assert await within(store.release("l9", slot, holder.token)), (
            "L9: a second release by the holder (often in the same millisecond, so it changes "
            "nothing) is still True: count the rows matched, not the rows changed"
        )
        taken = await within(backup.check(self.request("l9", slot)))
        assert taken.won and taken.attempt == 2, f"L9: a backup takes over at once, got {taken}"
        assert not await within(store.release("l9", slot, holder.token)), (
            "L9: the old holder can no longer release"
        )

    @rule("F1")
    @pytest.mark.asyncio
    async def test_F1_runner_fenced_when_a_takeover_refuses_its_renew(
        self, harness: BackendHarness
    ) -> None:
        """The runtime's runner (through `anarchon.once`) sees its renew refused after a
        takeover and fences itself within a heartbeat."""
        require(harness, "leases", "fencing")
        store = await self.open_lease(harness)
        backup = await self.open_lease(harness)
        slot = await self.current_slot(store)
        async with anarchon.once(store, "f1", slot, lease="900ms", instance="runner") as run:
            assert run is not None, "F1: the first claim of a fresh slot must win"
            assert not run.fenced, "F1: a runner that just won its claim is not fenced"
            await within(harness.force_expire("f1", slot))
            taken = await within(backup.claim(self.request("f1", slot, lease_ms=60_000)))
            assert taken.won and taken.attempt == 2, (
                f"L4: a takeover after the lease ran out wins attempt 2, got {taken}"
            )
            await _until(lambda: run.fenced, 3.0, "F1: the runner to fence itself")
            with pytest.raises(Fenced):
                run.ensure_held()
        after = await within(harness.raw_run("f1", slot))
        assert after is not None and after.attempt == 2 and after.status is RunStatus.RUNNING, (
            f"F1: the fenced runner's finish must be refused, got {after}"
        )

    @rule("F1")
    @pytest.mark.asyncio
    async def test_F1_runner_fences_itself_before_the_lease_can_pass(
        self, harness: BackendHarness
    ) -> None:
        """Cut off from the store (through the kit's proxy), the runner fences itself before the
        store would let a backup take over."""
        require(harness, "leases", "fencing")
        address = harness.address()
        if address is None:
            pytest.skip(
                "not applicable: the store has no TCP connection (harness.address() is None)"
            )
        async with FaultProxy(*address) as proxy:
            store = await self.open_lease(harness, address=proxy.address)
            backup = await self.open_lease(harness)
            slot = await self.current_slot(store)
            body = once_body(store, slot)
            async with body as run:
                assert run is not None, "F1: the first claim of a fresh slot must win"
                proxy.refuse()
                proxy.drop_all()
                await _until(lambda: run.fenced, 5.0, "F1: the cut-off runner to fence itself")
                answer = await within(backup.claim(self.request("f1cut", slot)))
                assert answer.outcome is Outcome.RUNNING, (
                    "F1: the runner fenced itself only after the store let a backup take over "
                    f"({answer})"
                )
                proxy.heal()

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
                assert claim.won and claim.attempt == attempt, (
                    f"F2/L4: claim {attempt} of slot {slot} must win attempt {attempt}, got {claim}"
                )
                run = await within(harness.raw_run("f2", slot))
                assert run is not None and run.attempt == attempt, (
                    f"F2: the store holds attempt {attempt} of slot {slot}, got {run}"
                )
                assert run.fencing_token == fencing_token(slot, attempt), (
                    f"F2: the fencing token of (slot {slot}, attempt {attempt}) is "
                    f"fencing_token(slot, attempt) = {fencing_token(slot, attempt)}, "
                    f"got {run.fencing_token}"
                )
                seen.append(run.fencing_token)
        assert seen == sorted(set(seen)), f"F2: fencing tokens must grow strictly: {seen}"


async def _until(condition: Callable[[], bool], seconds: float, what: str) -> None:
    deadline = time.monotonic() + seconds
    while not condition():
        if time.monotonic() > deadline:
            pytest.fail(f"timed out after {seconds} s waiting for {what}")
        await asyncio.sleep(0.01)


def once_body(store: ClaimStore, slot: int) -> AbstractAsyncContextManager[Run | None]:
    """A 3 s lease claimed by the runtime: its heartbeats go to `store`."""
    return anarchon.once(store, "f1cut", slot, lease="3s", instance="runner")
