"""A private ``nats-server -js`` killed and restarted mid-stream: claims resent with the same
token still decide correctly (C2), every slot keeps exactly one winner (C1), for both strategies.
The store reconnects by itself."""

from __future__ import annotations

import asyncio
import collections
import signal
import time

import pytest

from anarchon import ClaimRequest, Outcome, StoreUnavailable
from anarchon_nats import NATSStore

from .conftest import PrivateServer

SLOTS = 300
RESTART_AT = 100


async def resend(store: NATSStore, request: ClaimRequest, deadline_s: float = 60) -> Outcome:
    """The scheduler's retry: the same request until the store answers."""
    until = time.monotonic() + deadline_s
    while True:
        try:
            return (await store.claim(request)).outcome
        except StoreUnavailable:
            if time.monotonic() > until:
                raise
            await asyncio.sleep(0.05)


@pytest.mark.parametrize("strategy", ["msg-id", "expected-seq"])
@pytest.mark.parametrize("how", [signal.SIGTERM, signal.SIGKILL], ids=["stop", "kill"])
async def test_restart_mid_stream_keeps_one_winner(
    private_server: PrivateServer, strategy: str, how: signal.Signals
) -> None:
    stores = [
        NATSStore.create(private_server.url, strategy=strategy, timeout_ms="1s") for _ in range(3)
    ]
    for store in stores:
        await store.open()
    first = time.time_ns() // 1_000_000 - 60_000
    restarted = asyncio.Event()
    halfway = asyncio.Event()
    winners: dict[int, list[str]] = collections.defaultdict(list)
    unavailable = 0

    async def instance(store: NATSStore, n: int) -> None:
        nonlocal unavailable
        for i in range(SLOTS):
            request = ClaimRequest(
                job="tick", slot=first + i * 100, instance=f"i{n}", max_late_ms=600_000
            )
            try:
                outcome = (await store.claim(request)).outcome
            except StoreUnavailable:
                unavailable += 1
                outcome = await resend(store, request)
            assert outcome in (Outcome.WON, Outcome.LOST), outcome
            if outcome is Outcome.WON:
                winners[request.slot].append(request.token)
                if len(winners) >= RESTART_AT:
                    halfway.set()
                # C2 after the restart: the same token is still recognised
                if restarted.is_set():
                    assert await resend(store, request) is Outcome.WON

    async def restart() -> None:
        await halfway.wait()
        assert private_server.proc is not None
        private_server.proc.send_signal(how)
        private_server.proc.wait(10)
        await asyncio.sleep(0.5)
        private_server.start()
        restarted.set()

    try:
        await asyncio.wait_for(
            asyncio.gather(restart(), *(instance(s, n) for n, s in enumerate(stores))), 120
        )
        assert unavailable > 0, "the restart was never noticed: nothing was checked"
        assert sorted(winners) == [first + i * 100 for i in range(SLOTS)]
        assert all(len(t) == 1 for t in winners.values()), {
            s: t for s, t in winners.items() if len(t) != 1
        }
        # Runs decided before the restart are still remembered after it.
        early = first + 10 * 100
        rival = ClaimRequest(job="tick", slot=early, instance="late", max_late_ms=600_000)
        assert (await stores[0].claim(rival)).outcome is Outcome.LOST
        mine = ClaimRequest(
            job="tick", slot=early, token=winners[early][0], instance="x", max_late_ms=600_000
        )
        assert (await stores[1].claim(mine)).outcome is Outcome.WON
    finally:
        for store in stores:
            await store.close()
