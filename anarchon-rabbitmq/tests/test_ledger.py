"""What RabbitMQ adds to skips (S1, as far as it can keep them) and early claims (C5).

The rules themselves (a skip is never won, C5's never-twice) are certified by the conformance kit
(test_conformance.py). Kept here: the queue's body read behind the store's back (a skip message,
or none on a claimed slot), the edge of ``slot_ttl_ms`` (a claim as early as allowed outlives
max_late), a skip refused as too early declaring nothing, and a prepared queue gone (T3).
"""

from __future__ import annotations

import asyncio
import time

import pytest

from anarchon import ClaimRequest, ConfigError, Outcome, connect
from anarchon_rabbitmq import RabbitMQStore, queue_name

from .conftest import AMQP_URL, message_count, stored_body

REASON = "coalesced: a newer slot of this job ran"


def now_ms() -> int:
    return time.time_ns() // 1_000_000


def request(job: str, slot: int, **fields: object) -> ClaimRequest:
    return ClaimRequest(job=job, slot=slot, instance="test:1:0000", **fields)  # type: ignore[arg-type]


async def at(start: float, offset_s: float) -> None:
    """Wait until `offset_s` after the monotonic instant `start` (a schedule, not a race)."""
    await asyncio.sleep(max(0.0, start + offset_s - time.monotonic()))


async def test_S1_a_skip_fills_the_queue_and_later_claims_lose(
    prefix: str, cleanup: set[str]
) -> None:
    slot = now_ms() - 10
    name = queue_name(prefix, "job", slot)
    cleanup.add(name)
    async with connect(AMQP_URL, prefix=prefix) as a, connect(AMQP_URL, prefix=prefix) as b:
        assert not a.capabilities.skips
        skip = request("job", slot, skip_reason=REASON)
        skipped = await a.claim(skip)
        assert skipped.outcome is Outcome.SKIPPED, skipped
        assert (skipped.attempt, skipped.token, skipped.holder) == (0, skip.token, skip.instance)
        assert skipped.reason == REASON and skipped.skip_kind == "coalesced"
        later = await b.claim(request("job", slot))
        assert later.outcome is Outcome.LOST, "RabbitMQ cannot read the skip back: lost, never won"
        assert await a.history("job") == []
    body = await stored_body(name)
    assert body is not None and body["token"] == skip.token and body["skip"] == REASON


async def test_S1_a_skip_of_a_claimed_slot_is_lost(prefix: str, cleanup: set[str]) -> None:
    slot = now_ms() - 10
    name = queue_name(prefix, "job", slot)
    cleanup.add(name)
    async with connect(AMQP_URL, prefix=prefix) as store:
        first = request("job", slot)
        assert (await store.claim(first)).won
        lost = await store.claim(request("job", slot, skip_reason=REASON))
        assert lost.outcome is Outcome.LOST, lost
    body = await stored_body(name)
    assert body is not None and body["token"] == first.token and "skip" not in body


async def test_C5_a_claim_as_early_as_allowed_outlives_max_late(
    prefix: str, cleanup: set[str]
) -> None:
    """slot_ttl 2 s, max_late 1 s: a claim 1 s ahead makes a queue that lives to slot + 1 s,
    so a rival 0.7 s after the slot (not late) still finds it full."""
    slot = now_ms() + 1_000
    cleanup.add(queue_name(prefix, "edge", slot))
    options = {"slot_ttl_ms": "2s", "prepare_ahead_ms": 0}
    async with (
        connect(AMQP_URL, prefix=prefix, **options) as a,
        connect(AMQP_URL, prefix=prefix, **options) as b,
    ):
        start = time.monotonic()
        assert (await a.claim(request("edge", slot, max_late_ms=1_000))).won
        await at(start, 1.7)
        rival = await b.claim(request("edge", slot, max_late_ms=1_000))
        assert rival.outcome is Outcome.LOST, rival


async def test_C5_a_skip_too_far_ahead_declares_nothing(prefix: str) -> None:
    slot = now_ms() + 5_000
    async with connect(AMQP_URL, prefix=prefix, slot_ttl_ms="2s") as store:
        with pytest.raises(ConfigError, match="ahead of the clock"):
            await store.claim(request("far", slot, max_late_ms=1_000, skip_reason=REASON))
    assert await message_count(queue_name(prefix, "far", slot)) is None


async def test_T3_a_prepared_queue_gone_is_not_claimed_again(
    prefix: str, cleanup: set[str]
) -> None:
    """slot_ttl 2 s, prepared 1 s ahead: the queue expires 1 s after the slot. A claim 1.6 s
    after the slot with a huge max_late (the scheduler refuses such a job, T3; `store.claim`
    does not) was not late by slot_ttl, made a new queue and won the run a second time. Now it
    is late: the store remembers a run slot_ttl - prepare_ahead after its slot."""
    store = RabbitMQStore.create(AMQP_URL, prefix=prefix, slot_ttl_ms="2s", prepare_ahead_ms="1s")
    await store.open()
    try:
        assert store.capabilities.remembers_ms == 1_000
        slot = now_ms() + 1_000
        name = queue_name(prefix, "job", slot)
        cleanup.add(name)
        start = time.monotonic()
        await store.prepare(["job"], slot)
        await at(start, 1.0)
        assert (await store.claim(request("job", slot))).won
        await at(start, 2.6)
        again = await store.claim(request("job", slot, max_late_ms=10**9))
        assert again.outcome is Outcome.LATE and "slot_ttl" in again.reason, again
        assert await message_count(name) is None, "the prepared queue expired; none was made"
    finally:
        await store.close()
