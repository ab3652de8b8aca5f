"""A server restart mid-run: the pool recovers and claims are resent with the same token (C2).

Restarting the machine's PostgreSQL would disturb everyone else, so this test starts a private
instance (initdb + pg_ctl) on a free port in a temporary directory, and restarts that one.
"""

from __future__ import annotations

import asyncio
from collections.abc import Iterator

import pytest

from anarchon import ClaimRequest, Overlap, StoreUnavailable
from anarchon_postgres import PostgresStore, testing

from .private_server import PrivateServer, private_server


@pytest.fixture
def server() -> Iterator[PrivateServer]:
    with private_server() as srv:
        yield srv


async def test_server_restart_mid_run_recovers_and_resends_the_same_token(
    server: PrivateServer,
) -> None:
    store = PostgresStore.create(server.url, pool_min_size=2, pool_max_size=3)
    await store.open()
    first = await store.now_ms() - 60_000
    outages = 0
    tokens: dict[int, str] = {}

    async def claim_until_answered(slot: int) -> None:
        nonlocal outages
        request = ClaimRequest(
            job="restart",
            slot=slot,
            instance="a",
            lease_ms=600_000,
            max_late_ms=3_600_000,
            overlap=Overlap.ALLOW,
        )
        for _ in range(200):
            try:
                claim = await store.claim(request)
            except StoreUnavailable:
                outages += 1
                await asyncio.sleep(0.1)
                continue
            assert claim.won and claim.token == request.token, (slot, claim)
            tokens[slot] = request.token
            return
        raise AssertionError(f"slot {slot} was never answered")

    for i in range(20):
        await claim_until_answered(first + i * 1000)
    await asyncio.to_thread(server.ctl, "restart", "-m", "fast")
    for i in range(20, 40):
        await claim_until_answered(first + i * 1000)
    restart = asyncio.ensure_future(asyncio.to_thread(server.ctl, "restart", "-m", "immediate"))
    for i in range(40, 60):  # claims while the server goes down and comes back
        await claim_until_answered(first + i * 1000)
    await restart
    for i in range(60, 70):
        await claim_until_answered(first + i * 1000)
    await store.close()
    for slot, token in tokens.items():
        run = testing.raw_run(server.url, "public", "anarchon_runs", "cron", "restart", slot)
        assert run is not None and run.token == token and run.attempt == 1, slot
    assert len(tokens) == 70
    print(f"{outages} claims failed with StoreUnavailable and were resent")
