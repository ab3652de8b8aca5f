"""The ledger (S1) and early claims (C5) on the shared NATS server, both strategies.

A request with a `skip_reason` takes the slot like a claim, marked as a skip: the writer and every
later claim answer `skipped` with its reason, and `history` shows it. A claim sent so far ahead of
its slot that the stream (which remembers from the write) could forget it before
``slot + max_late`` is refused with `ConfigError`, before anything is published.
"""

from __future__ import annotations

import asyncio
import time

import pytest

from anarchon import Claim, ClaimRequest, ConfigError, Outcome, RunStatus, StoreCorrupt
from anarchon_nats import NATSStore
from anarchon_nats._records import decode

from .conftest import StoreFactory

STRATEGIES = ["msg-id", "expected-seq"]
REASON = "coalesced: a newer slot of this job ran"


def now_ms() -> int:
    return time.time_ns() // 1_000_000


def request(job: str, slot: int, **fields: object) -> ClaimRequest:
    return ClaimRequest(job=job, slot=slot, instance="test:1:aaaa", **fields)  # type: ignore[arg-type]


def windowed(strategy: str, window: str) -> dict[str, str]:
    """Options under which the stream remembers a claim for `window` from its write."""
    if strategy == "msg-id":
        return {"strategy": strategy, "duplicate_window_ms": window, "max_age_ms": "1m"}
    return {"strategy": strategy, "max_age_ms": window}


def assert_skipped(claim: Claim, skip: ClaimRequest) -> None:
    assert claim.outcome is Outcome.SKIPPED, claim
    assert (claim.attempt, claim.token, claim.holder) == (0, skip.token, skip.instance), claim
    assert claim.reason == skip.skip_reason and claim.skip_kind == "coalesced", claim


@pytest.mark.parametrize("strategy", STRATEGIES)
async def test_S1_a_skip_takes_the_slot_and_every_claim_answers_skipped(
    stores: StoreFactory, strategy: str
) -> None:
    one, two = await stores(strategy=strategy), await stores(strategy=strategy)
    assert one.capabilities.skips
    slot = now_ms() - 10
    skip = request("sync", slot, skip_reason=REASON)
    assert_skipped(await one.claim(skip), skip)
    assert_skipped(await two.claim(request("sync", slot)), skip)  # read back: never won
    assert_skipped(await one.claim(skip), skip)  # the skip resent: the same answer (C2)
    assert_skipped(await two.claim(request("sync", slot, skip_reason="other: reason")), skip)
    assert (await two.claim(request("sync", slot + 1000))).won, "another slot is another run"
    [record] = await two.history("sync", 1)
    assert record.slot == slot + 1000 and record.status is RunStatus.CLAIMED
    runs = await one.history("sync")
    assert [r.slot for r in runs] == [slot + 1000, slot]
    skipped = runs[1]
    assert skipped.status is RunStatus.SKIPPED and skipped.status.finished
    assert (skipped.attempt, skipped.token, skipped.holder) == (0, skip.token, skip.instance)
    assert skipped.error == REASON
    assert skipped.claimed_at is not None and skipped.finished_at == skipped.claimed_at


@pytest.mark.parametrize("strategy", STRATEGIES)
async def test_S1_a_skip_of_a_claimed_slot_is_lost(stores: StoreFactory, strategy: str) -> None:
    store = await stores(strategy=strategy)
    slot = now_ms() - 10
    first = request("sync", slot)
    assert (await store.claim(first)).won
    lost = await store.claim(request("sync", slot, skip_reason=REASON))
    assert lost.outcome is Outcome.LOST and lost.token == first.token, lost
    [record] = await store.history("sync")
    assert record.status is RunStatus.CLAIMED and record.token == first.token


@pytest.mark.parametrize("strategy", STRATEGIES)
async def test_S1_claim_many_takes_skips_in_the_batch(stores: StoreFactory, strategy: str) -> None:
    one, two = await stores(strategy=strategy), await stores(strategy=strategy)
    slot = now_ms() - 10
    earlier = request("j1", slot, skip_reason=REASON)
    assert_skipped(await two.claim(earlier), earlier)
    skip = request("j0", slot, skip_reason=REASON)
    claims = await one.claim_many([skip, request("j1", slot), request("j2", slot)])
    assert_skipped(claims[0], skip)
    assert_skipped(claims[1], earlier)
    assert claims[2].won
    assert_skipped(await two.claim(request("j0", slot)), skip)


def test_S1_a_skip_message_without_a_reason_is_corrupt() -> None:
    body = b'{"job":"j","slot":1,"token":"t","instance":"i","skip":""}'
    with pytest.raises(StoreCorrupt, match="message 7 of stream S"):
        decode(body, stream="S", seq=7)
    record = decode(body.replace(b'""', b'"late: old"'), stream="S", seq=7)
    assert record.status is RunStatus.SKIPPED and record.error == "late: old"


async def at(start: float, offset_s: float) -> None:
    """Wait until `offset_s` after the monotonic instant `start` (a schedule, not a race)."""
    await asyncio.sleep(max(0.0, start + offset_s - time.monotonic()))


@pytest.mark.parametrize("strategy", STRATEGIES)
async def test_C5_a_slot_claimed_ahead_is_never_won_twice(
    stores: StoreFactory, strategy: str
) -> None:
    """The chaos finding (issue 20): with a 2 s window, claims of a slot 6 s ahead at -6 s,
    -3.5 s and +0.5 s all answered `won` (the first claim was forgotten 2 s after its write).
    Now the claims the stream could not remember until slot + max_late are refused."""
    store = await stores(**windowed(strategy, "2s"))
    start = time.monotonic()
    slot = now_ms() + 6_000
    answers: list[Claim | ConfigError] = []
    for offset in (0.0, 2.5, 6.5):  # -6 s, -3.5 s, +0.5 s from the slot
        await at(start, offset)
        try:
            answers.append(await store.claim(request("ahead", slot, max_late_ms=1_000)))
        except ConfigError as exc:
            answers.append(exc)
    won = [a for a in answers if isinstance(a, Claim) and a.won]
    assert len(won) == 1, answers
    assert all(isinstance(a, ConfigError) for a in answers[:2]), answers
    message = str(answers[0])
    assert "ahead" in message and "2000 ms" in message and "at most 1000 ms" in message, message
    assert [r.slot for r in await store.history("ahead")] == [slot], (
        "refused claims publish nothing"
    )


@pytest.mark.parametrize("strategy", STRATEGIES)
async def test_C5_a_claim_as_early_as_allowed_is_remembered_past_max_late(
    stores: StoreFactory, strategy: str
) -> None:
    """Window 2 s, max_late 1 s: a claim 1 s ahead is accepted, and the stream still remembers
    it when the last claim that is not late comes, 0.9 s after the slot."""
    one, two = await stores(**windowed(strategy, "2s")), await stores(**windowed(strategy, "2s"))
    start = time.monotonic()
    slot = now_ms() + 1_000
    assert (await one.claim(request("edge", slot, max_late_ms=1_000))).won
    await at(start, 1.9)
    rival = await two.claim(request("edge", slot, max_late_ms=1_000))
    assert rival.outcome is Outcome.LOST, rival


@pytest.mark.parametrize("strategy", STRATEGIES)
async def test_C5_skips_and_batches_too_far_ahead_publish_nothing(
    stores: StoreFactory, strategy: str
) -> None:
    store = await stores(**windowed(strategy, "2s"))
    slot = now_ms() + 5_000
    with pytest.raises(ConfigError, match="ahead of the clock"):
        await store.claim(request("far", slot, max_late_ms=1_000, skip_reason=REASON))
    with pytest.raises(ConfigError, match="'far'"):
        await store.claim_many([request("near", now_ms()), request("far", slot, max_late_ms=1_000)])
    assert await store.history("far") == [] and await store.history("near") == []


async def test_C5_max_late_beyond_the_window_claims_nothing_ahead(stores: StoreFactory) -> None:
    """max_late above what the stream remembers (the scheduler refuses such a job, T3): a
    direct claim is accepted only from the slot on, where the T3 check bounds it."""
    store: NATSStore = await stores(duplicate_window_ms="2s", max_age_ms="1m")
    with pytest.raises(ConfigError, match="max_late to at most 2000 ms"):
        await store.claim(request("j", now_ms() + 200, max_late_ms=60_000))
    assert (await store.claim(request("j", now_ms(), max_late_ms=60_000))).won
