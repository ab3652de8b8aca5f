"""What PostgreSQL adds to the ledger (S1), against `memory://` and `postgresql://`.

The ledger itself (skip records, L1's order, later claims and checks, history, forgotten slots)
and C2 for finish are certified by the conformance kit (test_conformance.py) on every backend.
Kept here: the batch path (`claim_many`, its own PL/pgSQL function, which the kit does not
call), an overlap race through the
claim function, and skip reasons and holders that could break quoting.
"""

from __future__ import annotations

import asyncio

import pytest

from anarchon import Claim, ClaimRequest, Outcome, RunStatus
from anarchon_postgres import PostgresStore, testing

from .conftest import POSTGRES_URL, T0, Harness, url_with

SLOT = T0
LEASE = 30_000
MAX_LATE = 60_000
COALESCED = "coalesced: slot 1800000060000 is due too; catch_up 'latest' runs only the newest"


def request(
    slot: int = SLOT, *, job: str = "sync", instance: str = "a", **kw: object
) -> ClaimRequest:
    kw.setdefault("lease_ms", LEASE)
    kw.setdefault("max_late_ms", MAX_LATE)
    return ClaimRequest(job=job, slot=slot, instance=instance, **kw)  # type: ignore[arg-type]


def skipped(req: ClaimRequest, reason: str) -> Claim:
    return Claim(
        outcome=Outcome.SKIPPED, attempt=0, token=req.token, holder=req.instance, reason=reason
    )


async def test_S1_a_batch_answers_the_recorded_skip(harness: Harness) -> None:
    a, b = await harness.store(), await harness.store()
    first = request(skip_reason=COALESCED)
    answer = skipped(first, COALESCED)
    assert await a.claim(first) == answer
    record = harness.raw_run("sync", SLOT)
    harness.clock.advance(MAX_LATE * 3)  # long past max_late: still the record, never late
    assert await b.claim_many([first, request(instance="d")]) == [answer, answer]
    # Several slots: the claim function per request; the other slot is recorded late by it.
    other = request(SLOT + 1, instance="d")
    late = f"late: slot is {3 * MAX_LATE - 1} ms old, max_late is {MAX_LATE} ms"
    assert await b.claim_many([request(instance="d"), other]) == [answer, skipped(other, late)]
    assert harness.raw_run("sync", SLOT) == record  # nothing rewritten


async def test_L1_a_batch_of_a_forgotten_slot_is_late_and_writes_nothing(
    harness: Harness,
) -> None:
    store = await harness.store(history_limit=1, retention_margin_ms=1_000)
    keep = MAX_LATE + 3 * LEASE + 1_000
    old = request(SLOT)
    assert (await store.claim(old)).won
    assert await store.finish("sync", SLOT, old.token, RunStatus.SUCCEEDED)
    harness.clock.now = SLOT + keep + 1
    assert (await store.claim(request(SLOT + keep))).won
    assert harness.floor("sync") == SLOT
    for again in (
        request(SLOT, max_late_ms=10 * keep),
        request(SLOT, skip_reason=COALESCED, max_late_ms=10 * keep),
        request(SLOT),  # late too: the floor comes first
    ):
        (claim,) = await store.claim_many([again])
        assert claim.outcome is Outcome.LATE, claim
        assert claim.reason.startswith(f"forgotten: slot {SLOT} is at or below"), claim
        assert (claim.attempt, claim.token, claim.holder) == (0, None, None)
        assert harness.raw_run("sync", SLOT) is None


# -- PostgreSQL only -----------------------------------------------------------------------------
async def test_S1_concurrent_claims_of_a_late_slot_write_one_skip(schema: str) -> None:
    stores = [PostgresStore.create(url_with(schema)) for _ in range(6)]
    for store in stores:
        await store.open()
    try:
        now = await stores[0].now_ms()
        assert (await stores[0].claim(ClaimRequest(job="busy", slot=now, instance="a"))).won
        for job, slot in (("late", now - 120_000), ("busy", now + 1)):  # late, overlap
            requests = [ClaimRequest(job=job, slot=slot, instance=f"i{n}") for n in range(18)]
            claims = await asyncio.gather(
                *(stores[n % len(stores)].claim(r) for n, r in enumerate(requests))
            )
            assert {c.outcome for c in claims} == {Outcome.SKIPPED}
            assert len({(c.token, c.holder, c.reason) for c in claims}) == 1, claims
            run = testing.raw_run(POSTGRES_URL, schema, "anarchon_runs", "cron", job, slot)
            assert run is not None and (run.status, run.token) == (
                RunStatus.SKIPPED,
                claims[0].token,
            )
    finally:
        for store in stores:
            await store.close()


@pytest.mark.parametrize(
    "reason",
    [
        "coalesced: it's a \\ back%slash, $$ and $1 %s",
        "coalesced: $q$::text); DROP TABLE x; --",
        "paused: h\u00e9te \u6771\u4eac",
    ],
)
async def test_S1_any_skip_reason_and_holder_come_back_whole(
    pg_store: PostgresStore, reason: str
) -> None:
    now = await pg_store.now_ms()
    holder = "web 1: $q$ pid 7 "
    req = ClaimRequest(job="sync", slot=now, instance=holder, skip_reason=reason)
    assert await pg_store.claim(req) == skipped(req, reason)
    assert await pg_store.claim(ClaimRequest(job="sync", slot=now, instance="b")) == skipped(
        req, reason
    )
    batch = [ClaimRequest(job=j, slot=now, instance=holder, skip_reason=reason) for j in "xy"]
    assert await pg_store.claim_many(batch) == [skipped(r, reason) for r in batch]
    history = await pg_store.history("x")
    assert (history[0].holder, history[0].error) == (holder, reason)
