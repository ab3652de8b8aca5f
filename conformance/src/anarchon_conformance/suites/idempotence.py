"""C2 (a resent claim is recognised) and C3 (an ambiguous answer is never `won`), directly and
through the fault-injecting proxy, which loses the reply to each request of a claim in turn; and
C2 for finish (L8) through the proxy: a resent finish whose first reply was lost is True."""

from __future__ import annotations

import asyncio

import pytest

from anarchon import (
    Claim,
    ClaimRequest,
    ClaimStore,
    LeaseStore,
    Outcome,
    RunStatus,
    StoreUnavailable,
)

from .._harness import BackendHarness
from .._rules import rule
from ..proxy import FaultProxy
from ._base import HarnessSuite, require, within

__all__ = ["IdempotenceTests"]

MAX_WRITES = 40
"""The proxy loses the reply to write 1, 2, ... of a claim until a claim completes untouched."""


def _require_no_self_recognition(harness: BackendHarness) -> None:
    if harness.capabilities.self_recognition:
        pytest.skip("not applicable: the store recognises its own claims (C2 is checked instead)")


def _require_address(harness: BackendHarness) -> tuple[str, int]:
    address = harness.address()
    if address is None:
        pytest.skip("not applicable: the store has no TCP connection (harness.address() is None)")
    return address


async def resend(store: ClaimStore, request: ClaimRequest, tries: int = 30) -> Claim:
    """What the scheduler does after a transport error: the same request until it is answered."""
    for _ in range(tries):
        try:
            return await within(store.claim(request))
        except StoreUnavailable:
            await asyncio.sleep(0.1)
    raise AssertionError(f"the store did not answer {tries} resends of one claim")


async def resend_finish(
    store: LeaseStore, job: str, slot: int, token: str, tries: int = 30
) -> bool:
    """The runtime's resend of a finish after a transport error."""
    for _ in range(tries):
        try:
            return await within(store.finish(job, slot, token, RunStatus.FAILED))
        except StoreUnavailable:
            await asyncio.sleep(0.1)
    raise AssertionError(f"the store did not answer {tries} resends of one finish")


class IdempotenceTests(HarnessSuite):
    """C2 and C3. Exactly one of the two applies to a store; neither can be skipped then."""

    @rule("C2")
    @pytest.mark.asyncio
    async def test_C2_same_token_twice(self, harness: BackendHarness) -> None:
        require(harness, "self_recognition")
        store = await self.open(harness)
        other = await self.open(harness)
        slot = await self.current_slot(store)
        request = self.request("c2", slot)
        first = await within(store.claim(request))
        assert first.won, first
        for resent_by in (store, other):
            again = await within(resent_by.claim(request))
            assert again.won, f"C2: the same token sent again must be won, got {again}"
            assert again.attempt == first.attempt, (first, again)
        rival = await within(other.claim(self.request("c2", slot)))
        assert not rival.won, f"C1: a second token won after a resend: {rival}"

    @rule("C2")
    @pytest.mark.asyncio
    async def test_C2_same_token_after_finish_is_done(self, harness: BackendHarness) -> None:
        require(harness, "self_recognition", "leases")
        store = await self.open_lease(harness)
        slot = await self.current_slot(store)
        request = self.request("c2f", slot)
        await self.win(store, request)
        assert await within(store.finish("c2f", slot, request.token, RunStatus.SUCCEEDED))
        again = await within(store.claim(request))
        assert again.outcome is Outcome.DONE, f"C2: a finished run resent is done, got {again}"

    @rule("C2")
    @pytest.mark.asyncio
    async def test_C2_lost_reply_through_proxy(self, harness: BackendHarness) -> None:
        require(harness, "self_recognition")
        address = _require_address(harness)
        async with FaultProxy(*address) as proxy:
            store = await self.open(harness, address=proxy.address)
            direct = await self.open(harness)
            slot = await self.current_slot(direct)
            await within(store.now_ms())
            for writes in range(1, MAX_WRITES + 1):
                job = f"c2p{writes}"
                request = self.request(job, slot)
                proxy.drop_reply_after(writes)
                try:
                    await within(store.claim(request))
                except StoreUnavailable:
                    pass
                except Exception as exc:
                    raise AssertionError(
                        f"a lost reply must raise StoreUnavailable, got {exc!r}"
                    ) from exc
                untouched = proxy.drop_pending
                proxy.heal()
                claim = await resend(store, request)
                assert claim.won and claim.attempt == 1, (
                    f"C2: the retried claim (reply of write {writes} lost) must be won, got {claim}"
                )
                rival = await within(direct.claim(self.request(job, slot)))
                assert not rival.won, f"C1: another token won {job} after a lost reply: {rival}"
                if harness.capabilities.leases:
                    run = await within(harness.raw_run(job, slot))
                    assert run is not None and run.token == request.token and run.attempt == 1, run
                if untouched:
                    break
            else:
                pytest.fail(f"a claim took more than {MAX_WRITES} writes through the proxy")
            assert proxy.replies_dropped >= 1, "the proxy never lost a reply: nothing was checked"

    @rule("L8")
    @pytest.mark.asyncio
    async def test_L8_C2_lost_finish_reply_through_proxy(self, harness: BackendHarness) -> None:
        """The reply to each request of a finish is lost in turn; the runner resends the finish
        (as the runtime does) and must hear True, with the run finished once."""
        require(harness, "leases", "fencing")
        address = _require_address(harness)
        async with FaultProxy(*address) as proxy:
            store = await self.open_lease(harness, address=proxy.address)
            direct = await self.open_lease(harness)
            slot = await self.current_slot(direct)
            await within(store.now_ms())
            for writes in range(1, MAX_WRITES + 1):
                job = f"l8p{writes}"
                request = self.request(job, slot)
                await self.win(direct, request)
                proxy.drop_reply_after(writes)
                try:
                    first = await within(store.finish(job, slot, request.token, RunStatus.FAILED))
                    assert first, (
                        "L8/C2: the holder's finish must be True, also when the store resent it "
                        "itself after a lost reply"
                    )
                except StoreUnavailable:
                    pass
                except AssertionError:
                    raise
                except Exception as exc:
                    raise AssertionError(
                        f"a lost reply must raise StoreUnavailable, got {exc!r}"
                    ) from exc
                untouched = proxy.drop_pending
                proxy.heal()
                again = await resend_finish(store, job, slot, request.token)
                assert again, (
                    f"L8/C2: the finish resent after the reply to write {writes} was lost must "
                    "be True (same token, same status); False reads as fenced"
                )
                run = await within(harness.raw_run(job, slot))
                assert run is not None and run.status is RunStatus.FAILED, run
                assert run.token == request.token and run.attempt == 1, run
                if untouched:
                    break
            else:
                pytest.fail(f"a finish took more than {MAX_WRITES} writes through the proxy")
            assert proxy.replies_dropped >= 1, "the proxy never lost a reply: nothing was checked"

    @rule("C3")
    @pytest.mark.asyncio
    async def test_C3_resend_is_never_won(self, harness: BackendHarness) -> None:
        _require_no_self_recognition(harness)
        store = await self.open(harness)
        slot = await self.current_slot(store)
        request = self.request("c3", slot)
        first = await within(store.claim(request))
        assert first.won, first
        again = await within(store.claim(request))
        assert not again.won, f"C3: a resent claim must not be won without C2, got {again}"
        assert again.outcome in (Outcome.UNKNOWN, Outcome.LOST, Outcome.DONE), again

    @rule("C3")
    @pytest.mark.asyncio
    async def test_C3_lost_reply_never_won_twice_through_proxy(
        self, harness: BackendHarness
    ) -> None:
        _require_no_self_recognition(harness)
        address = _require_address(harness)
        async with FaultProxy(*address) as proxy:
            store = await self.open(harness, address=proxy.address)
            direct = await self.open(harness)
            slot = await self.current_slot(direct)
            await within(store.now_ms())
            for writes in range(1, MAX_WRITES + 1):
                job = f"c3p{writes}"
                request = self.request(job, slot)
                proxy.drop_reply_after(writes)
                first: Claim | None = None
                try:
                    first = await within(store.claim(request))
                except StoreUnavailable:
                    pass
                except Exception as exc:
                    raise AssertionError(
                        f"a lost reply must be unknown or raise StoreUnavailable, got {exc!r}"
                    ) from exc
                untouched = proxy.drop_pending
                proxy.heal()
                answers = [await resend(store, request)]
                answers.append(await within(direct.claim(self.request(job, slot))))
                if first is not None:
                    answers.append(first)
                won = [a for a in answers if a.won]
                assert len(won) <= 1, f"C3: {len(won)} wins of {job} after a lost reply"
                if untouched:
                    break
            else:
                pytest.fail(f"a claim took more than {MAX_WRITES} writes through the proxy")
            assert proxy.replies_dropped >= 1, "the proxy never lost a reply: nothing was checked"
