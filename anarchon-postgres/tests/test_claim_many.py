"""`claim_many` of `postgresql://` against `memory://` (the reference model), and across processes.

One slot, distinct jobs (what the scheduler sends) takes the batch function; any other batch takes
the claim function once per request. Both must answer exactly as `memory://` does, outcome by
outcome, and leave the same runs and floors behind.
"""

from __future__ import annotations

import asyncio
from collections import defaultdict
from pathlib import Path

import psycopg
import pytest
from psycopg import sql

from anarchon import Claim, ClaimRequest, LeaseStore, Outcome, Overlap, RunStatus
from anarchon.backend import overlap_reason
from anarchon_postgres import PostgresStore, testing
from anarchon_postgres._batch import pack_slot_batch, read_slot_answers
from anarchon_test_support import finish, go, wait_ready, worker_processes

from .conftest import POSTGRES_URL, T0, Harness, new_schema, require_server, url_with

S = T0
LEASE = 30_000
BIG = 10_000_000
"""max_late of the requests that must not be late."""
BATCH_AT = T0 + 1_000_000
WORKER = Path(__file__).with_name("many_worker.py")
COALESCED = "coalesced: a newer slot is due too"


def req(job: str, slot: int = S, *, instance: str = "a", **kw: object) -> ClaimRequest:
    kw.setdefault("max_late_ms", BIG)
    return ClaimRequest(job=job, slot=slot, instance=instance, lease_ms=LEASE, **kw)  # type: ignore[arg-type]


class Scenario:
    """Every case of L1-L6 and L11 for one batch at `BATCH_AT`, slot `S`; the requests are made
    once, so both stores see the same tokens."""

    def __init__(self) -> None:
        self.done = req("done", attempts=1)
        self.expired = req("expired", attempts=3)
        self.exhausted = req("exhausted", attempts=1)
        self.forgotten = req("forgotten", max_late_ms=1000, attempts=1)
        self.forgotten_next = req("forgotten", S + 400_000)
        self.live = req("live", instance="b")
        self.mine = req("mine")
        self.overlap = req("overlap", S + 900_000, instance="b")
        self.overlap_reason = req("overlap-reason", S + 900_000, instance="b")
        self.done_reason = req("done-reason", attempts=1)
        self.forgotten_reason = req("forgotten-reason", max_late_ms=1000, attempts=1)
        self.forgotten_reason_next = req("forgotten-reason", S + 400_000)
        self.batch = [
            req("new"),
            req("live"),
            self.mine,
            req("done"),
            req("late", max_late_ms=1000),
            req("forgotten"),
            req("overlap"),
            req("overlap-allowed", overlap=Overlap.ALLOW),
            req("expired", attempts=3),
            req("exhausted", attempts=1),
            # S1 and L1's order: a skip reason is recorded; lateness comes before it, and it
            # before overlap; a run that exists answers as without it; a forgotten slot is late.
            req("coalesced", skip_reason=COALESCED),
            req("late-reason", max_late_ms=1000, skip_reason=COALESCED),
            req("overlap-reason", skip_reason=COALESCED),
            req("done-reason", skip_reason=COALESCED),
            req("forgotten-reason", skip_reason=COALESCED),
        ]
        self.again = [
            req(r.job, max_late_ms=r.max_late_ms, overlap=r.overlap, attempts=r.attempts,
                instance="c")
            for r in self.batch
        ]  # fmt: skip

    async def setup(self, h: Harness, store: LeaseStore) -> None:
        async def finish(request: ClaimRequest) -> None:
            assert (await store.claim(request)).won
            assert await store.finish(request.job, request.slot, request.token, RunStatus.SUCCEEDED)

        await finish(self.done)  # L6
        await finish(self.done_reason)
        assert (await store.claim(self.expired)).won  # its lease runs out: takeover (L4)
        assert (await store.claim(self.exhausted)).won  # no attempts left: interrupted (L5)
        # The run at S is deleted by the next win (history_limit=1): floor = S (L11).
        await finish(self.forgotten)
        await finish(self.forgotten_reason)
        h.clock.now = T0 + 500_000
        assert (await store.claim(self.forgotten_next)).won
        assert (await store.claim(self.forgotten_reason_next)).won
        assert h.floor("forgotten") == S
        assert h.floor("forgotten-reason") == S
        h.clock.now = BATCH_AT - 10_000
        assert (await store.claim(self.live)).won  # another instance's live lease (L3)
        assert (await store.claim(self.mine)).won  # the batch resends this one (C2, L2)
        assert (await store.claim(self.overlap)).won  # another slot's live lease (overlap)
        assert (await store.claim(self.overlap_reason)).won
        h.clock.now = BATCH_AT


async def _drop(h: Harness) -> None:
    await h.close()
    if h.kind == "postgres":
        testing.drop(POSTGRES_URL, h.schema)


async def test_a_mixed_batch_answers_as_memory_does() -> None:
    require_server()
    scenario = Scenario()
    jobs = [r.job for r in scenario.batch]
    answers: dict[str, list[Claim]] = {}
    again: dict[str, list[Claim]] = {}
    states: dict[str, dict[str, object]] = {}
    for kind in ("memory", "postgres"):
        h = Harness(kind, new_schema())
        try:
            store = await h.store(history_limit=1, retention_margin_ms=1)
            await scenario.setup(h, store)
            answers[kind] = await store.claim_many(scenario.batch)
            states[kind] = {job: (h.raw_run(job, S), h.floor(job)) for job in jobs}
            h.clock.advance(1)
            again[kind] = await store.claim_many(scenario.again)
        finally:
            await _drop(h)
    for job, m, p in zip(jobs, answers["memory"], answers["postgres"], strict=True):
        assert p == m, f"{job}: postgres {p} != memory {m}"
    assert {job: c.outcome for job, c in zip(jobs, answers["memory"], strict=True)} == {
        "new": Outcome.WON,
        "live": Outcome.RUNNING,
        "mine": Outcome.WON,
        "done": Outcome.DONE,
        "late": Outcome.SKIPPED,
        "forgotten": Outcome.LATE,
        "overlap": Outcome.SKIPPED,
        "overlap-allowed": Outcome.WON,
        "expired": Outcome.WON,
        "exhausted": Outcome.DONE,
        "coalesced": Outcome.SKIPPED,
        "late-reason": Outcome.SKIPPED,
        "overlap-reason": Outcome.SKIPPED,
        "done-reason": Outcome.DONE,
        "forgotten-reason": Outcome.LATE,
    }
    by_job = dict(zip(jobs, answers["postgres"], strict=True))
    assert by_job["expired"].attempt == 2
    assert (by_job["forgotten"].reason or "").startswith("forgotten")
    assert (by_job["forgotten-reason"].reason or "").startswith("forgotten")
    assert by_job["late"].reason == "late: slot is 1000000 ms old, max_late is 1000 ms"
    assert by_job["late-reason"].reason == by_job["late"].reason
    assert by_job["overlap"].reason == overlap_reason(S + 900_000)
    assert by_job["coalesced"].reason == by_job["overlap-reason"].reason == COALESCED
    assert (by_job["exhausted"].reason or "").startswith("run interrupted")
    assert states["postgres"] == states["memory"]
    for job, m, p in zip(jobs, again["memory"], again["postgres"], strict=True):
        assert p == m, f"{job} again: postgres {p} != memory {m}"


async def test_S1_a_batch_answers_as_single_claims_do() -> None:
    """The batch function decides set-based what the claim function decides one by one: the same
    requests, sent one claim at a time to one schema and as one batch to another, get the same
    answers (skip reasons too) and leave the same runs, skip records and floors."""
    require_server()
    scenario = Scenario()
    jobs = [r.job for r in scenario.batch]
    answers: dict[str, list[Claim]] = {}
    states: dict[str, dict[str, object]] = {}
    for way in ("single", "batch"):
        h = Harness("postgres", new_schema())
        try:
            store = await h.store(history_limit=1, retention_margin_ms=1)
            await scenario.setup(h, store)
            if way == "single":
                answers[way] = [await store.claim(r) for r in scenario.batch]
            else:
                answers[way] = await store.claim_many(scenario.batch)
            states[way] = {job: (h.raw_run(job, S), h.floor(job)) for job in jobs}
        finally:
            await _drop(h)
    for job, one, many in zip(jobs, answers["single"], answers["batch"], strict=True):
        assert many == one, f"{job}: batch {many} != single {one}"
    assert states["batch"] == states["single"]
    assert sum(c.outcome is Outcome.SKIPPED for c in answers["batch"]) == 5


@pytest.mark.parametrize("kind", ["memory", "postgres"])
async def test_a_batch_of_several_slots_or_a_job_twice(kind: str) -> None:
    """Not the one-slot shape: the claim function per request, in order within each job."""
    if kind == "postgres":
        require_server()
    h = Harness(kind, new_schema())
    try:
        store = await h.store()
        h.clock.now = S + 5_000
        first, twice = req("j"), req("j", instance="b")
        claims = await store.claim_many([first, req("k", S - 1000), twice, req("j", S - 1000)])
        assert [c.outcome for c in claims] == [
            Outcome.WON,
            Outcome.WON,
            Outcome.RUNNING,
            Outcome.SKIPPED,
        ]
        assert claims[2].token == first.token
        assert claims[3].reason == overlap_reason(S)
    finally:
        await h.close()
        if kind == "postgres":
            testing.drop(POSTGRES_URL, h.schema)


async def test_a_batch_lost_to_another_batch_takes_no_lock_and_matches() -> None:
    require_server()
    h = Harness("postgres", new_schema())
    try:
        a, b = await h.store(), await h.store()
        jobs = [f"job-{i:04d}" for i in range(500)]
        won = await a.claim_many([req(j, instance="a") for j in jobs])
        assert all(c.won and c.attempt == 1 for c in won)
        lost = await b.claim_many([req(j, instance="b") for j in jobs])
        assert all(c.outcome is Outcome.RUNNING for c in lost)
        assert [c.token for c in lost] == [c.token for c in won]
        resent = await a.claim_many(
            [req(j, instance="a", token=c.token) for j, c in zip(jobs, won, strict=True)]
        )
        assert resent == won
    finally:
        await h.close()
        testing.drop(POSTGRES_URL, h.schema)


@pytest.mark.processes
async def test_C1_four_processes_claim_many_the_same_2000_jobs(schema: str) -> None:
    url = url_with(schema)
    store = PostgresStore.create(url)
    await store.open()
    slot = await store.now_ms()
    await store.close()
    with worker_processes(WORKER, 4, url, slot, 2000) as procs:
        await asyncio.to_thread(wait_ready, procs)
        go(procs)
        results = await asyncio.to_thread(lambda: [finish(p) for p in procs])
    winners: dict[str, list[str]] = defaultdict(list)
    for result in results:
        for job, token in result["won"]:
            winners[job].append(token)
        assert set(result["outcomes"]) <= {"won", "running"}, result["outcomes"]
    assert len(winners) == 2000, f"jobs nobody won: {2000 - len(winners)}"
    doubles = {job: tokens for job, tokens in winners.items() if len(tokens) > 1}
    assert not doubles, f"C1 broken: {len(doubles)} jobs won more than once"
    for job in ("j-0000", "j-1999"):
        run = testing.raw_run(POSTGRES_URL, schema, "anarchon_runs", "cron", job, slot)
        assert run is not None and run.token == winners[job][0]


async def test_jobs_never_claimed_get_their_rows_outside_the_batch(pg_store: PostgresStore) -> None:
    """The batch function inserts no job row (inserting one while holding other jobs' locks could
    close a cycle with another batch): it names the missing jobs and claims nothing for the
    requests that would lock them; the store inserts those rows on their own and sends again."""
    now = await pg_store.now_ms()
    held = ClaimRequest(job="held", slot=now, instance="b")
    assert (await pg_store.claim(held)).won
    schema = pg_store.options.schema
    batch = [ClaimRequest(job=j, slot=now, instance="a") for j in ("new-b", "held", "new-a")]
    params = pack_slot_batch(
        batch, prefix="cron", slot=now, margin_ms=60_000, tail=(1000, "30s", None)
    )
    rows = await pg_store._fetchall(pg_store._sql.claim_slot, params)
    assert sorted(n for n, _ in rows) == [-1, 2]  # the read answered "held"; two rows missing
    assert dict(rows)[-1].split() in (["new-a", "new-b"], ["new-b", "new-a"])
    assert testing.raw_run(POSTGRES_URL, schema, "anarchon_runs", "cron", "new-a", now) is None
    with psycopg.connect(POSTGRES_URL) as conn:
        jobs = conn.execute(
            sql.SQL("SELECT job FROM {} ORDER BY job").format(
                sql.Identifier(schema, "anarchon_runs_jobs")
            )
        ).fetchall()
    assert jobs == [("held",)]

    claims = await pg_store.claim_many(batch)
    assert [c.outcome for c in claims] == [Outcome.WON, Outcome.RUNNING, Outcome.WON]
    assert claims[1].token == held.token
    assert testing.floor(POSTGRES_URL, schema, "anarchon_runs", "cron", "new-a") is None
    run = testing.raw_run(POSTGRES_URL, schema, "anarchon_runs", "cron", "new-a", now)
    assert run is not None and run.token == batch[2].token


@pytest.mark.parametrize("late", [False, True], ids=["won", "skipped"])
async def test_a_run_inserted_between_the_read_and_the_lock_is_not_won_twice(
    pg_store: PostgresStore, late: bool
) -> None:
    """The batch function inserts its new runs without checking each one first. A claim that
    inserted one after the function's read, while the function waited for that job's lock, makes
    the INSERT collide; the function then inserts again with the check: that request is lost, the
    others won. Likewise for late slots: the other claim's skip record stays, the others are
    recorded. Called on a plain connection, so no resend by the store can hide a failure."""
    schema = pg_store.options.schema
    now = await pg_store.now_ms()
    jobs = ["a", "b", "c"]
    first = [req(j, now - 1_000, overlap=Overlap.ALLOW) for j in jobs]
    assert all(c.won for c in await pg_store.claim_many(first))  # the jobs' rows exist
    slot = now - 100_000 if late else now
    batch = [req(j, slot, overlap=Overlap.ALLOW, max_late_ms=60_000) for j in jobs]
    other = req("b", slot, instance="other")
    status, lease_until = ("skipped", None) if late else ("running", slot + LEASE)
    params = pack_slot_batch(
        batch, prefix="cron", slot=slot, margin_ms=60_000, tail=(1000, "30s", None)
    )
    connect = psycopg.AsyncConnection.connect
    async with (
        await connect(POSTGRES_URL) as blocker,
        await connect(POSTGRES_URL, autocommit=True) as batcher,
        await connect(POSTGRES_URL, autocommit=True) as watch,
    ):
        await blocker.execute(
            sql.SQL("SELECT 1 FROM {} WHERE prefix = 'cron' AND job = 'b' FOR UPDATE").format(
                sql.Identifier(schema, "anarchon_runs_jobs")
            )
        )
        claiming = asyncio.ensure_future(batcher.execute(pg_store._sql.claim_slot, params))
        waiting = False
        for _ in range(500):  # until the batch has read (no run of b) and waits for b's lock
            cur = await watch.execute(
                "SELECT count(*) FROM pg_stat_activity WHERE wait_event_type = 'Lock' AND pid = %s",
                (batcher.info.backend_pid,),
            )
            waiting = (await cur.fetchone()) == (1,)
            if waiting or claiming.done():
                break
            await asyncio.sleep(0.01)
        assert waiting, "the batch never waited for the lock of job b"
        await blocker.execute(
            sql.SQL(
                "INSERT INTO {} (prefix, job, slot, status, attempt, token, holder, claimed_at,"
                " lease_until, error, keep_until) VALUES ('cron', 'b', %s, %s, %s, %s, %s, %s,"
                " %s, %s, %s)"
            ).format(sql.Identifier(schema, "anarchon_runs")),
            (
                slot,
                status,
                0 if late else 1,
                other.token,
                other.instance,
                now,
                lease_until,
                "late: theirs" if late else None,
                now + LEASE,
            ),
        )
        await blocker.commit()
        rows = await (await asyncio.wait_for(claiming, 10)).fetchall()
    claims = read_slot_answers(rows, batch, "test")
    if late:
        assert [c.outcome for c in claims] == [Outcome.SKIPPED] * 3
        assert claims[1].reason == "late: theirs"
        assert claims[0].reason.startswith("late: slot is ")
    else:
        assert [c.outcome for c in claims] == [Outcome.WON, Outcome.RUNNING, Outcome.WON]
    assert (claims[1].token, claims[1].holder) == (other.token, "other")
    for request in (batch[0], batch[2]):
        run = testing.raw_run(POSTGRES_URL, schema, "anarchon_runs", "cron", request.job, slot)
        assert run is not None and (run.token, run.status.value) == (request.token, status)
    run = testing.raw_run(POSTGRES_URL, schema, "anarchon_runs", "cron", "b", slot)
    assert run is not None and run.token == other.token
