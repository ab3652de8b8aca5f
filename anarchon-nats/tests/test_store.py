"""The claim rules on the shared NATS server, for both strategies: won and lost (C1), a resend
with the same token (C2), a read-back that finds nothing (C3), lateness by the instance's clock
(T4), the memory rule (T3) with short windows, batches and history."""

from __future__ import annotations

import asyncio
import time

import nats
import pytest

import anarchon
import anarchon_nats
from anarchon import ClaimRequest, ConfigError, Outcome, RunStatus
from anarchon_nats import NATSStore
from anarchon_nats._strategies import STRATEGIES as STRATEGY_CLASSES

from .conftest import NATS_URL, StoreFactory

STRATEGIES = ["msg-id", "expected-seq"]


def now_ms() -> int:
    return time.time_ns() // 1_000_000


def request(job: str, slot: int, **fields: object) -> ClaimRequest:
    return ClaimRequest(job=job, slot=slot, instance="test:1:aaaa", **fields)  # type: ignore[arg-type]


@pytest.mark.parametrize("strategy", STRATEGIES)
async def test_C1_first_wins_the_rest_lose(stores: StoreFactory, strategy: str) -> None:
    one, two = await stores(strategy=strategy), await stores(strategy=strategy)
    slot = now_ms() - 10
    first = request("sync", slot)
    assert (await one.claim(first)).outcome is Outcome.WON
    lost = await two.claim(request("sync", slot))
    assert lost.outcome is Outcome.LOST
    assert lost.token == first.token and lost.holder == first.instance
    assert (await two.claim(request("sync", slot + 1000))).won, "another slot is another run"
    assert (await two.claim(request("other", slot))).won, "another job is another run"


@pytest.mark.parametrize("strategy", STRATEGIES)
async def test_C2_resend_with_the_same_token_is_won(stores: StoreFactory, strategy: str) -> None:
    one, two = await stores(strategy=strategy), await stores(strategy=strategy)
    claim = request("sync", now_ms() - 10)
    assert (await one.claim(claim)).won
    for store in (one, two, one):
        again = await store.claim(claim)
        assert again.won and again.attempt == 1 and again.token == claim.token, again


@pytest.mark.parametrize("strategy", STRATEGIES)
async def test_C3_duplicate_of_a_deleted_claim_is_lost(stores: StoreFactory, strategy: str) -> None:
    store = await stores(strategy=strategy)
    claim = request("sync", now_ms() - 10)
    assert (await store.claim(claim)).won
    nc = await nats.connect(NATS_URL)
    try:
        js = nc.jetstream()
        subject = store.strategy.subject("sync", claim.slot)
        msg = await js.get_last_msg(store.stream, subject)
        await js.delete_msg(store.stream, msg.seq)
    finally:
        await nc.close()
    again = await store.claim(claim)
    if strategy == "msg-id":
        # the id is still in the duplicate window, its message is gone: never won (C3)
        assert again.outcome is Outcome.LOST, again
        assert "gone" in again.reason
    else:
        # expected-seq remembers a run only through its message (documented)
        assert again.won, again


@pytest.mark.parametrize("strategy", STRATEGIES)
async def test_T4_late_slot_is_late_without_publishing(stores: StoreFactory, strategy: str) -> None:
    store = await stores(strategy=strategy)
    slot = now_ms() - 120_000
    late = await store.claim(request("sync", slot, max_late_ms=60_000))
    assert late.outcome is Outcome.LATE and "max_late" in late.reason
    assert await store.history("sync") == []


async def test_T3_slot_older_than_the_window_is_late(stores: StoreFactory) -> None:
    store = await stores(duplicate_window_ms="1s", max_age_ms="1m")
    old = await store.claim(request("sync", now_ms() - 1_500, max_late_ms=3_600_000))
    assert old.outcome is Outcome.LATE and "T3" in old.reason


async def test_T3_window_is_remembered_then_forgotten(stores: StoreFactory) -> None:
    """The stream remembers a msg-id claim for duplicate_window_ms: within it a rival loses;
    after it the id is forgotten, which is why the backend (T4) and the scheduler (T3) refuse
    such old slots."""
    store = await stores(duplicate_window_ms="1s", max_age_ms="1m")
    assert store.capabilities.remembers_ms == 1000
    slot = now_ms()
    assert (await store.claim(request("w", slot, max_late_ms=10_000))).won
    await asyncio.sleep(0.6)
    assert (await store.claim(request("w", slot, max_late_ms=10_000))).outcome is Outcome.LOST
    await asyncio.sleep(0.6)
    refused = await store.claim(request("w", slot, max_late_ms=10_000))
    assert refused.outcome is Outcome.LATE, refused
    # Bypassing the check shows what it protects against: the store forgot the id.
    ack = await store._opened().js.publish(
        store.strategy.subject("w", slot), b"{}", headers={"Nats-Msg-Id": f"w:{slot}"}
    )
    assert not ack.duplicate


async def test_T3_scheduler_refuses_max_late_beyond_the_window(prefix: str) -> None:
    store = NATSStore.create(NATS_URL, prefix=prefix, duplicate_window_ms="1s", max_age_ms="1m")
    scheduler = anarchon.Scheduler(store, instance="t3:1:aaaa", clock_skew="100ms")

    @scheduler.job("* * * * *", name="tick", max_late="5s")
    def tick() -> None:
        pass

    with pytest.raises(ConfigError) as info:
        await scheduler.start()
    message = str(info.value)
    assert "max_late" in message and "clock_skew" in message and "T3" in message
    assert "900 ms" in message, message


async def test_T3_expected_seq_remembers_max_age(stores: StoreFactory) -> None:
    store = await stores(strategy="expected-seq", duplicate_window_ms="1s", max_age_ms="2h")
    assert store.capabilities.remembers_ms == 7_200_000
    slot = now_ms() - 1_500
    assert (await store.claim(request("sync", slot, max_late_ms=3_600_000))).won
    assert (await store.claim(request("sync", slot))).outcome is Outcome.LOST


@pytest.mark.parametrize("strategy", STRATEGIES)
async def test_claim_many_decides_each_in_order(stores: StoreFactory, strategy: str) -> None:
    one, two = await stores(strategy=strategy), await stores(strategy=strategy)
    slot = now_ms() - 10
    taken = request("j1", slot)
    assert (await two.claim(taken)).won
    mine = request("j2", slot)
    assert (await one.claim(mine)).won
    batch = [request("j0", slot), request("j1", slot), mine, request("j3", slot - 3_600_000)]
    claims = await one.claim_many(batch)
    assert [c.outcome for c in claims] == [Outcome.WON, Outcome.LOST, Outcome.WON, Outcome.LATE]
    assert claims[1].token == taken.token
    assert isinstance(one, anarchon.SupportsClaimMany)


@pytest.mark.parametrize("strategy", STRATEGIES)
async def test_history_newest_slot_first(stores: StoreFactory, strategy: str) -> None:
    store = await stores(strategy=strategy)
    base = now_ms() - 10_000
    tokens = {}
    for slot in (base + 1000, base, base + 3000, base + 2000):
        claim = request("hist", slot)
        assert (await store.claim(claim)).won
        tokens[slot] = claim.token
    assert (await store.claim(request("other", base))).won
    runs = await store.history("hist", 3)
    assert [r.slot for r in runs] == [base + 3000, base + 2000, base + 1000]
    assert all(r.status is RunStatus.CLAIMED and r.token == tokens[r.slot] for r in runs)
    assert all(r.claimed_at is not None for r in runs)
    assert len(await store.history("hist")) == 4
    assert await store.history("nothing") == []


async def test_capabilities_and_clock(stores: StoreFactory) -> None:
    store = await stores()
    caps = store.capabilities
    assert (caps.leases, caps.self_recognition, caps.fencing, caps.overlap) == (
        False,
        True,
        False,
        False,
    )
    assert caps.history and caps.batch and not caps.store_clock
    assert caps.remembers_ms == 600_000
    assert await store.now_ms() is None


async def test_connect_by_url(prefix: str) -> None:
    async with anarchon.connect(f"{NATS_URL}?strategy=expected-seq&prefix={prefix}") as store:
        assert isinstance(store, NATSStore)
        assert store.stream == f"ANARCHON_{prefix}"
        assert (await store.claim(request("url", now_ms()))).won


def test_every_strategy_option_has_its_class() -> None:
    """The names the options accept and the strategy classes are the same set, and each store
    holds the strategy its option names (subjects of that strategy's shape)."""
    assert set(STRATEGY_CLASSES) == set(anarchon_nats.STRATEGIES) == set(STRATEGIES)
    for name in STRATEGIES:
        store = NATSStore.create(NATS_URL, strategy=name, prefix="p")
        assert store.strategy.name == name
        assert store.strategy.stream == store.stream == "ANARCHON_p"
    assert NATSStore.create(NATS_URL, prefix="p").strategy.subject("j", 5) == "p.j.claims"
    by_slot = NATSStore.create(NATS_URL, strategy="expected-seq", prefix="p").strategy
    assert by_slot.subject("j", 5) == "p.j.slot.5" and by_slot.slot_of("p.j.slot.5") == 5
