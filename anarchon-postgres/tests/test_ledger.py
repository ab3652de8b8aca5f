"""The ledger (S1), L1's order and C2 for finish, against `memory://` and `postgresql://`.

A claim that decides a slot is not to run (late, a caller's skip reason, overlap) writes a
``skipped`` record in its atomic step; every later claim and check of the slot answers it, and
`history` shows it. A forgotten slot (at or below the floor) stays `late` with nothing written.
A finish resent after its reply was lost answers True again and writes nothing.
"""

from __future__ import annotations

import asyncio

import pytest

from anarchon import Claim, ClaimRequest, Outcome, Overlap, RunRecord, RunStatus
from anarchon._leases import overlap_reason
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


def skip_record(req: ClaimRequest, now: int, reason: str) -> RunRecord:
    return RunRecord(
        job=req.job,
        slot=req.slot,
        status=RunStatus.SKIPPED,
        attempt=0,
        token=req.token,
        holder=req.instance,
        claimed_at=now,
        lease_until=None,
        finished_at=now,
        error=reason,
    )


async def test_S1_overlap_is_recorded_naming_the_holding_slot(harness: Harness) -> None:
    store = await harness.store()
    holding = request(SLOT, overlap=Overlap.ALLOW)
    assert (await store.claim(holding)).won
    done = request(SLOT + 1_000, overlap=Overlap.ALLOW)
    assert (await store.claim(done)).won
    assert await store.finish("sync", done.slot, done.token, RunStatus.SUCCEEDED)
    harness.clock.advance(5_000)
    nxt = request(SLOT + 5_000, instance="b")
    reason = overlap_reason(SLOT)  # the live one, not the finished one
    assert await store.claim(nxt) == skipped(nxt, reason)
    assert harness.raw_run("sync", nxt.slot) == skip_record(nxt, T0 + 5_000, reason)


async def test_S1_overlap_names_one_of_several_holding_slots(harness: Harness) -> None:
    store = await harness.store()
    holders = [request(SLOT + i, overlap=Overlap.ALLOW) for i in range(3)]
    for req in holders:
        assert (await store.claim(req)).won
    harness.force_expire("sync", SLOT + 1)  # no longer live: never named
    claim = await store.claim(request(SLOT + 10, instance="b"))
    assert claim.reason in (overlap_reason(SLOT), overlap_reason(SLOT + 2)), claim


async def test_S1_skip_reason_is_recorded(harness: Harness) -> None:
    store = await harness.store()
    harness.clock.advance(700)
    req = request(skip_reason=COALESCED)
    assert await store.claim(req) == skipped(req, COALESCED)
    assert harness.raw_run("sync", SLOT) == skip_record(req, T0 + 700, COALESCED)


async def test_S1_later_claims_and_checks_answer_the_skip(harness: Harness) -> None:
    a, b = await harness.store(), await harness.store()
    first = request(skip_reason=COALESCED)
    answer = skipped(first, COALESCED)
    assert await a.claim(first) == answer
    record = harness.raw_run("sync", SLOT)
    harness.clock.advance(MAX_LATE * 3)  # long past max_late: still the record, never late
    for later in (
        first,  # the deciding claim, resent (C2)
        request(instance="b"),
        request(instance="b", overlap=Overlap.ALLOW, max_late_ms=10 * MAX_LATE),
        request(instance="c", skip_reason="coalesced: another reason"),
    ):
        assert await b.claim(later) == answer
        assert await b.check(later) == answer
    assert await b.claim_many([request(instance="d")]) == [answer]
    # Several slots: the claim function per request; the other slot is recorded late by it.
    other = request(SLOT + 1, instance="d")
    late = f"late: slot is {3 * MAX_LATE - 1} ms old, max_late is {MAX_LATE} ms"
    assert await b.claim_many([request(instance="d"), other]) == [answer, skipped(other, late)]
    assert harness.raw_run("sync", SLOT) == record  # nothing rewritten


async def test_S1_history_shows_the_skips_and_they_count_for_retention(
    harness: Harness,
) -> None:
    store = await harness.store(history_limit=2, retention_margin_ms=1_000)
    keep = MAX_LATE + 3 * LEASE + 1_000
    ran = request(SLOT, overlap=Overlap.ALLOW)
    assert (await store.claim(ran)).won
    coalesced = request(SLOT + 1_000, skip_reason=COALESCED)
    assert (await store.claim(coalesced)).outcome is Outcome.SKIPPED
    overlap = request(SLOT + 2_000, instance="b")
    assert (await store.claim(overlap)).outcome is Outcome.SKIPPED
    history = await store.history("sync")
    assert [(r.slot, r.status, r.attempt, r.error) for r in history] == [
        (SLOT + 2_000, RunStatus.SKIPPED, 0, overlap_reason(SLOT)),
        (SLOT + 1_000, RunStatus.SKIPPED, 0, COALESCED),
        (SLOT, RunStatus.RUNNING, 1, None),
    ]
    assert history[0] == skip_record(overlap, T0, overlap_reason(SLOT))
    # Skip records are runs for L11: past their keep_until they go, and raise the floor.
    assert await store.finish("sync", SLOT, ran.token, RunStatus.SUCCEEDED)
    harness.clock.now = SLOT + 2_000 + keep + 1
    newest = request(SLOT + 2_000 + keep)
    assert (await store.claim(newest)).won
    assert [r.slot for r in await store.history("sync")] == [newest.slot, SLOT + 2_000]
    assert harness.floor("sync") == SLOT + 1_000


async def test_L1_a_forgotten_slot_is_late_and_writes_nothing(harness: Harness) -> None:
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
        claim = await store.claim(again)
        assert claim.outcome is Outcome.LATE, claim
        assert claim.reason.startswith(f"forgotten: slot {SLOT} is at or below"), claim
        assert (claim.attempt, claim.token, claim.holder) == (0, None, None)
        assert harness.raw_run("sync", SLOT) is None
        assert (await store.claim_many([again]))[0] == claim
        assert harness.raw_run("sync", SLOT) is None


async def test_L1_order_late_then_skip_reason_then_overlap(harness: Harness) -> None:
    store = await harness.store()
    holding = ClaimRequest(job="sync", slot=SLOT, instance="a", lease_ms=10 * MAX_LATE)
    assert (await store.claim(holding)).won  # live throughout: every later slot overlaps
    harness.clock.advance(MAX_LATE + 5)
    late = request(SLOT - 100, skip_reason=COALESCED)  # late and a reason: late
    reason = f"late: slot is {MAX_LATE + 105} ms old, max_late is {MAX_LATE} ms"
    assert await store.claim(late) == skipped(late, reason)
    coalesced = request(SLOT + 1_000, skip_reason=COALESCED)  # a reason and an overlap: reason
    assert await store.claim(coalesced) == skipped(coalesced, COALESCED)
    plain = request(SLOT + 2_000)
    assert await store.claim(plain) == skipped(plain, overlap_reason(SLOT))
    records = {r.slot: r.error for r in await store.history("sync")}
    assert records == {
        SLOT + 2_000: overlap_reason(SLOT),
        SLOT + 1_000: COALESCED,
        SLOT: None,
        SLOT - 100: reason,
    }


async def test_L1_a_skip_reason_does_not_change_a_run_that_exists(harness: Harness) -> None:
    store = await harness.store()
    own = request()
    won = await store.claim(own)
    assert won.won
    resent = request(token=own.token, skip_reason=COALESCED)
    assert await store.claim(resent) == won  # L2
    other = await store.claim(request(instance="b", skip_reason=COALESCED))
    assert (other.outcome, other.token) == (Outcome.RUNNING, own.token)  # L3
    harness.force_expire("sync", SLOT)
    takeover = request(instance="c", skip_reason=COALESCED)
    claim = await store.claim(takeover)
    assert (claim.outcome, claim.attempt, claim.token) == (Outcome.WON, 2, takeover.token)  # L4


async def test_C2_a_resent_finish_is_true_and_writes_nothing(harness: Harness) -> None:
    store = await harness.store()
    req = request()
    assert (await store.claim(req)).won
    harness.clock.advance(1_000)
    assert await store.finish("sync", SLOT, req.token, RunStatus.FAILED, "boom")
    run = harness.raw_run("sync", SLOT)
    assert run is not None and (run.status, run.finished_at) == (RunStatus.FAILED, T0 + 1_000)
    harness.clock.advance(1_000)
    assert await store.finish("sync", SLOT, req.token, RunStatus.FAILED, "boom")
    assert await store.finish("sync", SLOT, req.token, RunStatus.FAILED, "other text")
    assert harness.raw_run("sync", SLOT) == run  # not written again: same time, same error


async def test_L8_finish_with_another_status_or_token_is_false(harness: Harness) -> None:
    store = await harness.store()
    req = request()
    assert (await store.claim(req)).won
    assert await store.finish("sync", SLOT, req.token, RunStatus.SUCCEEDED)
    run = harness.raw_run("sync", SLOT)
    for status in (RunStatus.FAILED, RunStatus.INTERRUPTED):
        assert not await store.finish("sync", SLOT, req.token, status)
    assert not await store.finish("sync", SLOT, request().token, RunStatus.SUCCEEDED)
    assert not await store.finish("sync", SLOT + 1, req.token, RunStatus.SUCCEEDED)
    assert harness.raw_run("sync", SLOT) == run


async def test_S1_a_skip_record_is_never_finished_renewed_or_released(harness: Harness) -> None:
    store = await harness.store()
    req = request(skip_reason=COALESCED)
    assert (await store.claim(req)).outcome is Outcome.SKIPPED
    record = harness.raw_run("sync", SLOT)
    for status in (RunStatus.SUCCEEDED, RunStatus.FAILED, RunStatus.INTERRUPTED):
        assert not await store.finish("sync", SLOT, req.token, status)
    with pytest.raises(ValueError, match="needs succeeded, failed or interrupted"):
        await store.finish("sync", SLOT, req.token, RunStatus.SKIPPED)
    assert not await store.renew("sync", SLOT, req.token, LEASE)
    assert not await store.release("sync", SLOT, req.token)
    assert harness.raw_run("sync", SLOT) == record


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


async def test_C2_concurrent_resends_of_one_finish_are_both_true(schema: str) -> None:
    a = PostgresStore.create(url_with(schema))
    b = PostgresStore.create(url_with(schema))
    await a.open()
    await b.open()
    try:
        for n in range(20):
            req = ClaimRequest(job=f"j{n}", slot=await a.now_ms(), instance="a")
            assert (await a.claim(req)).won
            results = await asyncio.gather(
                a.finish(req.job, req.slot, req.token, RunStatus.SUCCEEDED),
                b.finish(req.job, req.slot, req.token, RunStatus.SUCCEEDED),
            )
            assert results == [True, True]
    finally:
        await a.close()
        await b.close()


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
