"""REC: through the fault-injecting proxy, the store survives the server dropping every
connection, reports an outage as `StoreUnavailable` (never `won`, never a hang) and recovers."""

from __future__ import annotations

import asyncio

import pytest

from anarchon import StoreUnavailable

from .._harness import BackendHarness
from .._rules import rule
from ..proxy import FaultProxy
from ._base import HarnessSuite, within
from .idempotence import _require_address, resend

__all__ = ["ReconnectTests"]


class ReconnectTests(HarnessSuite):
    """Outage behaviour of network stores; not applicable without a TCP connection."""

    @rule("REC")
    @pytest.mark.asyncio
    async def test_REC_reconnect_after_all_connections_dropped(
        self, harness: BackendHarness
    ) -> None:
        address = _require_address(harness)
        async with FaultProxy(*address) as proxy:
            store = await self.open(harness, address=proxy.address)
            slot = await self.current_slot(store)
            await self.win(store, self.request("rec", slot))
            for n in range(1, 4):
                proxy.drop_all()
                claim = await resend(store, self.request("rec", slot + n * 1000))
                assert claim.won, f"REC: after the connections dropped, got {claim}"

    @rule("REC")
    @pytest.mark.asyncio
    async def test_REC_outage_is_store_unavailable_then_recovers(
        self, harness: BackendHarness
    ) -> None:
        address = _require_address(harness)
        async with FaultProxy(*address) as proxy:
            store = await self.open(harness, address=proxy.address)
            slot = await self.current_slot(store)
            proxy.refuse()
            proxy.drop_all()
            request = self.request("outage", slot)
            for _ in range(2):
                try:
                    claim = await within(store.claim(request), 30)
                except StoreUnavailable:
                    continue
                except Exception as exc:
                    raise AssertionError(
                        f"REC: an unreachable store must raise StoreUnavailable, got {exc!r}"
                    ) from exc
                raise AssertionError(f"REC: an unreachable store answered {claim}")
            proxy.heal()
            claim = await resend(store, request)
            assert claim.won, f"REC: after the outage the resent claim is won, got {claim}"

    @rule("REC")
    @pytest.mark.asyncio
    async def test_REC_slow_replies_keep_one_winner(self, harness: BackendHarness) -> None:
        address = _require_address(harness)
        async with FaultProxy(*address) as proxy:
            slow = await self.open(harness, address=proxy.address)
            fast = await self.open(harness)
            slot = await self.current_slot(fast)
            await within(slow.now_ms())
            proxy.delay_replies(0.2)
            claims = await within(
                asyncio.gather(
                    *(slow.claim(self.request("slow", slot)) for _ in range(3)),
                    *(fast.claim(self.request("slow", slot)) for _ in range(3)),
                ),
                60,
            )
            assert sum(c.won for c in claims) == 1, f"C1 under slow replies: {claims}"
