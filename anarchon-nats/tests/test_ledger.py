"""What NATS adds to the ledger (S1) and early claims (C5), both strategies.

The rules themselves (a skip takes the slot and is answered to every later claim, a skip of a
claimed slot is not won, C5's never-twice) are certified by the conformance kit on both
strategies (test_conformance.py). Kept here: the batch path (`claim_many`, which the kit does not
call), a damaged skip message, the edge of the stream's window (a claim as early as allowed is
still remembered at slot + max_late), and skips and batches refused as too early.
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
