"""Preparing slots ahead on the real broker: `prepare` declares each run's queue empty, the claims
then fill it as before, a prepared queue is remembered from its claim on (T3), refusals are named,
and the scheduler prepares every slot before it comes."""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Sequence

import aiormq
import pytest
from pamqp import commands as spec

from anarchon import (
    ClaimRequest,
    ConfigError,
    Outcome,
    Run,
    Scheduler,
    StoreCorrupt,
    StoreUnavailable,
    SupportsPrepare,
    connect,
)
from anarchon_rabbitmq import RabbitMQStore, _link, queue_name
from anarchon_test_support import eventually

from .conftest import AMQP_URL, delete_queues, message_count, stored_token


def now_ms() -> int:
    return time.time_ns() // 1_000_000


def request(job: str, slot: int, **kw: object) -> ClaimRequest:
    return ClaimRequest(job=job, slot=slot, instance="test:1:0000", **kw)  # type: ignore[arg-type]


async def test_prepare_declares_empty_queues_that_the_claims_fill(
    prefix: str, cleanup: set[str]
) -> None:
    jobs = ["a", "b", "c"]
    async with connect(AMQP_URL, prefix=prefix) as store, connect(AMQP_URL, prefix=prefix) as other:
        assert isinstance(store, SupportsPrepare)
        # Ahead by more than a first connect in a process may take (it loads the plugins).
        slot = now_ms() // 1000 * 1000 + 5000
        names = [queue_name(prefix, job, slot) for job in jobs]
        cleanup.update(names)
        await store.prepare(jobs, slot)
        await store.prepare(jobs, slot)
        assert [await message_count(n) for n in names] == [0, 0, 0], "prepared, not claimed"
        assert (await other.claim(request("a", slot))).won, "whoever claims first wins"
        assert (await store.claim(request("a", slot))).outcome is Outcome.LOST
        assert (await store.claim(request("b", slot))).won
        assert [await message_count(n) for n in names] == [1, 1, 0]


async def test_prepared_queues_are_warmed_up_and_never_seen_holding_it(
    prefix: str, cleanup: set[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    """The warm-up (persistent, expiration 0) is stored and dropped in one step of the queue:
    a prepared queue is empty right after; into a claimed queue it is refused like any second
    message. The broker was probed first, on a queue of the store's own, deleted after."""
    probe = f"{prefix}.warm-up-probe.fixed"
    cleanup.add(probe)
    monkeypatch.setattr(_link, "probe_name", lambda prefix, nonce: probe)
    slot = now_ms() // 1000 * 1000 + 5000
    name = queue_name(prefix, "a", slot)
    cleanup.add(name)
    async with connect(AMQP_URL, prefix=prefix) as store:
        assert isinstance(store, RabbitMQStore)
        await store.prepare(["a"], slot)
        assert store._link._warm_up is True, "this broker drops a message that expires on arrival"
        assert await message_count(probe) is None, "the probe queue is deleted"
        assert await message_count(name) == 0
        claim = await store.claim(request("a", slot))
        assert claim.won
        await store.prepare(["a"], slot)  # warming a claimed queue up: refused
        assert await message_count(name) == 1
        assert await stored_token(name) == claim.token


async def test_a_broker_that_keeps_the_warm_up_gets_none(
    prefix: str,
    cleanup: set[str],
    monkeypatch: pytest.MonkeyPatch,
    caplog: pytest.LogCaptureFixture,
) -> None:
    """As if the broker kept a message that expires on arrival: the warm-up is made one that never
    expires. The probe finds it kept, and no prepared queue gets one (it would fill the queue
    and make every claim of the run lose)."""
    monkeypatch.setattr(_link, "WARM_UP", spec.Basic.Properties(delivery_mode=2))
    slot = now_ms() // 1000 * 1000 + 5000
    name = queue_name(prefix, "a", slot)
    cleanup.add(name)
    async with connect(AMQP_URL, prefix=prefix) as store:
        assert isinstance(store, RabbitMQStore)
        with caplog.at_level(logging.WARNING, logger="anarchon.rabbitmq"):
            await store.prepare(["a"], slot)
        assert store._link._warm_up is False
        assert any("prepared without warming them up" in r.getMessage() for r in caplog.records)
        assert await message_count(name) == 0
        assert (await store.claim(request("a", slot))).won


async def test_the_claim_of_a_prepared_queue_is_the_publish_alone(
    prefix: str, cleanup: set[str]
) -> None:
    """A queue this store prepared is not declared again by its claim. If it is gone after all
    (deleted by hand here), the publish comes back unrouted, nothing is stored, and the resend
    declares it."""
    slot = now_ms() // 1000 * 1000 + 5000
    names = {job: queue_name(prefix, job, slot) for job in ("a", "b")}
    cleanup.update(names.values())
    async with connect(AMQP_URL, prefix=prefix) as store:
        assert isinstance(store, RabbitMQStore)
        await store.prepare(["a", "b"], slot)
        assert set(store._prepared) == set(names.values())
        await delete_queues([names["a"]])
        with pytest.raises(StoreUnavailable, match="returned unrouted"):
            await store.claim(request("a", slot))
        assert (await store.claim(request("a", slot))).won, "the resend declares the queue"
        assert (await store.claim(request("b", slot))).won
        assert [await message_count(n) for n in names.values()] == [1, 1]
        assert store._prepared == {}, "each claim took its queue's entry"


def test_prepared_queues_of_slots_long_past_are_forgotten() -> None:
    store = RabbitMQStore.create(AMQP_URL, slot_ttl_ms="10s")
    now = now_ms()
    store._prepared = {"old": now - 11_000, "recent": now - 9_000, "ahead": now + 5_000}
    store._forget_prepared()
    assert set(store._prepared) == {"recent", "ahead"}


async def test_T3_a_prepared_run_is_remembered_slot_ttl_minus_the_lead(
    prefix: str, cleanup: set[str]
) -> None:
    """slot_ttl 4 s, prepared 2 s ahead: remembers_ms is 2 s. The claims do not restart the
    queue's expiry (no-wait declarations), so the run is gone 4 s after the preparation, and the
    store must not have promised more."""
    async with connect(AMQP_URL, prefix=prefix, slot_ttl_ms=4000, prepare_ahead_ms=2000) as store:
        assert isinstance(store, SupportsPrepare)
        assert store.prepare_ahead_ms == 2000
        assert store.capabilities.remembers_ms == 2000
        slot = now_ms() + 2000
        name = queue_name(prefix, "job", slot)
        cleanup.add(name)
        prepared_at = time.monotonic()
        await store.prepare(["job"], slot)
        assert await message_count(name) == 0  # a passive declare: restarts the expiry, once
        await asyncio.sleep(max(0.0, prepared_at + 2.0 - time.monotonic()))
        assert (await store.claim(request("job", slot, max_late_ms=1900))).won
        await asyncio.sleep(max(0.0, prepared_at + 3.0 - time.monotonic()))
        lost = await store.claim(request("job", slot, max_late_ms=1900))
        assert lost.outcome is Outcome.LOST, f"remembered 1 s after its slot: {lost}"
        await asyncio.sleep(max(0.0, prepared_at + 5.0 - time.monotonic()))
        assert await message_count(name) is None, "expired by its preparation's clock"


async def test_a_slot_further_ahead_than_the_lead_is_not_prepared(prefix: str) -> None:
    async with connect(AMQP_URL, prefix=prefix, prepare_ahead_ms="2s") as store:
        assert isinstance(store, SupportsPrepare)
        slot = now_ms() + 10_000
        await store.prepare(["job"], slot)
        assert await message_count(queue_name(prefix, "job", slot)) is None, (
            "prepared too early: the queue would expire before remembers_ms after its slot"
        )


def test_prepare_ahead_is_an_option_bounded_by_slot_ttl() -> None:
    default = RabbitMQStore.create(AMQP_URL)
    assert default.prepare_ahead_ms == 60_000
    assert default.capabilities.remembers_ms == 600_000 - 60_000
    assert RabbitMQStore.create(AMQP_URL, prepare_ahead_ms="2s").prepare_ahead_ms == 2_000
    short = RabbitMQStore.create(AMQP_URL, slot_ttl_ms="10s", prepare_ahead_ms="1m")
    assert short.prepare_ahead_ms == 5_000, "at most half of slot_ttl"
    assert short.capabilities.remembers_ms == 5_000
    off = RabbitMQStore.create(AMQP_URL, prepare_ahead_ms=0)
    assert off.prepare_ahead_ms == 0 and off.capabilities.remembers_ms == 600_000
    with pytest.raises(ConfigError, match="prepare_ahead_ms: duration must be 0 or more"):
        RabbitMQStore.create(AMQP_URL, prepare_ahead_ms=-1)


async def test_preparing_a_foreign_queue_is_refused_by_name(prefix: str, cleanup: set[str]) -> None:
    slot = now_ms() // 1000 * 1000 + 5000
    foreign = queue_name(prefix, "job", slot)
    cleanup.update({foreign, queue_name(prefix, "fine", slot)})
    connection = await aiormq.connect(AMQP_URL)
    try:
        channel = await connection.channel()
        await channel.queue_declare(foreign, durable=True, arguments={"x-max-length": 5})
    finally:
        await connection.close()
    async with connect(AMQP_URL, prefix=prefix) as store:
        assert isinstance(store, SupportsPrepare)
        with pytest.raises(StoreCorrupt) as info:
            await store.prepare(["fine", "job"], slot)
        assert foreign in str(info.value)
        await store.prepare(["fine"], slot)  # a new channel: the others are not affected
        assert await message_count(queue_name(prefix, "fine", slot)) == 0
        assert (await store.claim(request("fine", slot))).won


async def test_preparing_with_the_broker_unreachable_is_store_unavailable(prefix: str) -> None:
    store = RabbitMQStore.create(
        "amqp://guest:guest@127.0.0.1:1/", prefix=prefix, connect_timeout_ms=500
    )
    with pytest.raises(StoreUnavailable):
        await store.prepare(["job"], now_ms() + 5000)


class WatchedStore(RabbitMQStore):
    """The real store, noting what each preparation left on the broker."""

    prepared: dict[int, list[int | None]]

    async def prepare(self, jobs: Sequence[str], slot: int) -> None:
        await super().prepare(jobs, slot)
        counts = [await message_count(queue_name(self.options.prefix, j, slot)) for j in jobs]
        self.prepared.setdefault(slot, counts)


async def test_the_scheduler_prepares_every_slot_before_it_comes(
    prefix: str, cleanup: set[str]
) -> None:
    store = WatchedStore.create(AMQP_URL, prefix=prefix, slot_ttl_ms="1m")
    assert isinstance(store, WatchedStore)
    store.prepared = {}
    ran: list[int] = []
    scheduler = Scheduler(store, instance="test:1:0000", environ={})

    @scheduler.job("* * * * * *", name="tick", max_late="500ms")
    def tick(run: Run) -> None:
        ran.append(run.slot)

    async with scheduler:
        await eventually(lambda: len(ran) >= 3, 15, "three runs")
    cleanup.update(queue_name(prefix, "tick", s) for s in [*ran, *store.prepared])
    prepared_and_ran = [s for s in ran if s in store.prepared]
    assert len(prepared_and_ran) >= 2, f"ran {ran}, prepared {sorted(store.prepared)}"
    for slot in prepared_and_ran:
        assert store.prepared[slot] == [0], f"slot {slot}: prepared queue not empty and there"


async def test_a_preparation_cut_short_leaves_the_store_working(prefix: str) -> None:
    """The scheduler bounds a preparation in time; cancelled mid-batch, the next one and the
    claims still work (the queues expire by themselves after slot_ttl)."""
    async with connect(AMQP_URL, prefix=prefix, slot_ttl_ms="30s") as store:
        assert isinstance(store, SupportsPrepare)
        slot = now_ms() + 10_000
        jobs = [f"j{n}" for n in range(3000)]
        with pytest.raises(asyncio.TimeoutError):
            await asyncio.wait_for(store.prepare(jobs, slot), 0.2)
        await store.prepare(["after"], slot)
        assert await message_count(queue_name(prefix, "after", slot)) == 0
        # Claimed ahead of the slot: max_late within what a queue made now outlives (C5).
        assert (await store.claim(request("after", slot, max_late_ms=10_000))).won
        assert (await store.claim(request("j2999", slot, max_late_ms=10_000))).won


CUTS_S = (0.005, 0.02, 0.05, 0.08, 0.12, 0.16, 0.2, 0.25, 0.3, 0.4)
"""Where a preparation is cut short: while connecting, probing the warm-up, sending a batch,
waiting for the broker to work through it, and in the next batch."""


async def test_a_preparation_cut_short_anywhere_never_holds_up_a_claim(prefix: str) -> None:
    """Each preparation is cancelled at another point, and a claim (of a queue it did not
    prepare) follows at once, while the broker may still be answering the cancelled one: every
    claim is won within the confirm timeout, never left `unknown` (C3) for want of an answer."""
    async with connect(
        AMQP_URL, prefix=prefix, slot_ttl_ms="30s", confirm_timeout_ms=3000
    ) as store:
        assert isinstance(store, SupportsPrepare)
        slot = now_ms() + 10_000
        for cut, delay in enumerate(CUTS_S):
            jobs = [f"c{cut}-{n}" for n in range(1000)]
            with pytest.raises(asyncio.TimeoutError):
                await asyncio.wait_for(store.prepare(jobs, slot), delay)
            claim = await store.claim(request(f"claim{cut}", slot, max_late_ms=10_000))
            assert claim.won, f"after a preparation cut short at {delay} s: {claim}"
        await store.prepare(["last"], slot)
        assert await message_count(queue_name(prefix, "last", slot)) == 0
        assert (await store.claim(request("last", slot, max_late_ms=10_000))).won


async def test_closing_the_store_after_a_preparation_cut_short_closes_both_connections(
    prefix: str,
) -> None:
    """The batch a cut-short preparation left running on its connection is let finish (a
    second or so), then both connections close: nothing is left pending when the loop ends
    (pytest turns a task destroyed pending into an error)."""
    store = RabbitMQStore.create(AMQP_URL, prefix=prefix, slot_ttl_ms="30s")
    await store.open()
    slot = now_ms() + 10_000
    with pytest.raises(asyncio.TimeoutError):
        await asyncio.wait_for(store.prepare([f"j{n}" for n in range(1000)], slot), 0.2)
    link = store._link
    connections = [link._connection, link._preparing]
    assert connections[1] is not None and connections[1] is not connections[0], (
        "preparations have a connection of their own"
    )
    started = time.monotonic()
    await store.close()
    assert time.monotonic() - started < _link.CLOSE_GRACE_S + 3
    assert all(c is not None and c.is_closed for c in connections)
    with pytest.raises(StoreUnavailable, match="the store is closed"):
        await link.declare(["late"], {}, until=lambda: False, declared=lambda batch: None)
    assert link._preparing is None, "no connection opened after the close"
