"""Pause and trigger on PostgreSQL (P1, X1): the store's calls against the real server (on a
manual clock where time matters), both claim functions keeping the pause, a schema made before
the control tables, the rights they need, and P1 under a race of processes."""

from __future__ import annotations

import asyncio
import uuid
from collections.abc import AsyncIterator

import psycopg
import pytest
from psycopg import sql

from anarchon import (
    ClaimRequest,
    ConfigError,
    Outcome,
    RunStatus,
    SupportsPause,
    SupportsTrigger,
    new_token,
)
from anarchon.backend import is_triggered_slot
from anarchon_postgres import PostgresStore, _code, _schema, testing
from anarchon_postgres._names import Names
from anarchon_postgres._read_only import read_grants
from anarchon_test_support import T0, ManualClock, finish, go, race_processes, wait_ready
from anarchon_test_support.race import race_spec

from .conftest import POSTGRES_URL, admin, as_role, url_with

SLOT = T0 + 60_000
HOUR_MS = 3_600_000
TABLE = "anarchon_runs"


def request(job: str = "report", slot: int = SLOT, **more: object) -> ClaimRequest:
    fields: dict[str, object] = {"lease_ms": 60_000, "max_late_ms": HOUR_MS, **more}
    return ClaimRequest(job=job, slot=slot, token=new_token(), instance="host:1:abcd", **fields)  # type: ignore[arg-type]


@pytest.fixture
def clock() -> ManualClock:
    return ManualClock(SLOT)


@pytest.fixture
async def store(schema: str, clock: ManualClock) -> AsyncIterator[PostgresStore]:
    store = PostgresStore.create(url_with(schema), clock=clock)
    await store.open()
    yield store
    await store.close()


def tables(schema: str) -> set[str]:
    with psycopg.connect(POSTGRES_URL, autocommit=True) as conn:
        rows = conn.execute(
            "SELECT c.relname FROM pg_catalog.pg_class c JOIN pg_catalog.pg_namespace n "
            "ON n.oid = c.relnamespace WHERE n.nspname = %s AND c.relkind = 'r'",
            (schema,),
        ).fetchall()
    return {str(row[0]) for row in rows}


async def test_postgres_says_it_pauses_and_triggers(store: PostgresStore) -> None:
    assert store.capabilities.pause and store.capabilities.trigger
    assert isinstance(store, SupportsPause) and isinstance(store, SupportsTrigger)


async def test_P1_the_claim_function_records_a_paused_job_s_slot(
    store: PostgresStore, schema: str
) -> None:
    pause = await store.pause("report", reason="deploy freeze", by="ops@host")
    assert (pause.job, pause.since_ms, pause.until_ms, pause.by) == (
        "report",
        SLOT,
        None,
        "ops@host",
    )
    first = request()
    claim = await store.claim(first)
    assert claim.outcome is Outcome.SKIPPED and claim.reason == "paused: deploy freeze"
    run = testing.raw_run(POSTGRES_URL, schema, TABLE, "cron", "report", SLOT)
    assert run is not None and run.status is RunStatus.SKIPPED
    assert (run.error, run.token, run.attempt) == ("paused: deploy freeze", first.token, 0)
    # A skip reason in the request gives way to the pause (sent as parameters, not inline).
    coalesced = request(slot=SLOT - 1000, skip_reason="coalesced: a newer slot is due")
    assert (await store.claim(coalesced)).reason == "paused: deploy freeze"
    assert (await store.claim(request("other"))).won


@pytest.mark.parametrize("shape", ["one slot", "several slots"])
async def test_P1_both_batch_paths_keep_the_pause(store: PostgresStore, shape: str) -> None:
    """Distinct jobs of one slot go to the batch function; other batches to the claim function
    once per request."""
    await store.pause("b", reason="frozen")
    second = SLOT if shape == "one slot" else SLOT - 1000
    batch = [request("a"), request("b"), request("c", slot=second), request("b", slot=second)]
    if shape == "one slot":
        batch = batch[:3]
    claims = await store.claim_many(batch)
    outcomes = [c.outcome for c in claims]
    expected = [Outcome.WON, Outcome.SKIPPED, Outcome.WON, Outcome.SKIPPED][: len(batch)]
    assert outcomes == expected, claims
    assert all(c.reason == "paused: frozen" for c in claims if c.outcome is Outcome.SKIPPED)


async def test_P1_the_batch_function_records_pauses_among_other_skips(
    store: PostgresStore, clock: ManualClock
) -> None:
    """The batch function's skip path: one job late, one paused, one with a skip reason, one
    won, in one call."""
    await store.pause("paused")
    clock.advance(2000)
    batch = [
        request("late", max_late_ms=1000),
        request("paused"),
        request("coalesced", skip_reason="coalesced: a newer slot is due"),
        request("won"),
    ]
    claims = await store.claim_many(batch)
    assert [c.outcome for c in claims] == [Outcome.SKIPPED] * 3 + [Outcome.WON]
    assert [c.skip_kind for c in claims[:3]] == ["late", "paused", "coalesced"]


async def test_P1_runs_made_before_the_pause_go_on(
    store: PostgresStore, schema: str, clock: ManualClock
) -> None:
    first = request(attempts=3)
    assert (await store.claim(first)).won
    await store.pause("report")
    assert await store.renew("report", SLOT, first.token, 60_000)
    testing.force_expire(POSTGRES_URL, schema, TABLE, "cron", "report", SLOT, now_ms=clock())
    takeover = await store.claim(request(attempts=3))
    assert takeover.won and takeover.attempt == 2
    assert await store.finish("report", SLOT, takeover.token, RunStatus.SUCCEEDED)


async def test_P1_until_by_the_server_s_clock_and_resume_end_the_pause(
    store: PostgresStore, clock: ManualClock
) -> None:
    ended = await store.pause("report", until_ms=SLOT - 1)
    assert ended.until_ms == SLOT - 1 and await store.pauses() == []
    await store.pause("report", until_ms=SLOT + 5000)
    assert [p.job for p in await store.pauses()] == ["report"]
    assert (await store.claim(request(slot=SLOT - 1000))).outcome is Outcome.SKIPPED
    clock.advance(5000)  # until_ms is exclusive
    assert await store.pauses() == []
    assert (await store.claim(request())).won
    assert await store.resume("report") is False
    await store.pause("report")
    assert await store.resume("report") is True
    assert await store.resume("report") is False
    assert (await store.claim(request(slot=SLOT + 1000, overlap="allow"))).won


async def test_pauses_are_sorted_as_python_sorts_and_replaced(store: PostgresStore) -> None:
    for job in ("b", "B", "a_1", "a-1"):
        await store.pause(job, reason="first")
    await store.pause("b", reason="second")
    pauses = await store.pauses()
    assert [p.job for p in pauses] == sorted(["b", "B", "a_1", "a-1"])
    assert [p.reason for p in pauses if p.job == "b"] == ["second"]


@pytest.mark.parametrize(
    ("kwargs", "words"),
    [
        ({"reason": "two\nlines"}, "reason must be printable"),
        ({"by": "x" * 201}, "at most 200"),
        ({"until_ms": "tomorrow"}, "until_ms must be None"),
        ({"until_ms": True}, "until_ms must be None"),
    ],
)
async def test_bad_pause_input_is_refused_with_what_to_do(
    store: PostgresStore, kwargs: dict[str, object], words: str
) -> None:
    with pytest.raises(ConfigError, match=words):
        await store.pause("report", **kwargs)  # type: ignore[arg-type]
    with pytest.raises(ConfigError, match="job name"):
        await store.trigger("bad job")
    assert await store.pauses() == []


async def test_X1_triggers_get_distinct_slots_off_whole_seconds_and_are_kept_a_day(
    store: PostgresStore, clock: ManualClock
) -> None:
    first = await store.trigger("report", reason="backfill", by="ops")
    second = await store.trigger("report")
    other = await store.trigger("other")
    assert (first.slot, second.slot, other.slot) == (SLOT + 1, SLOT + 2, SLOT + 1)
    assert (first.requested_at, first.reason, first.by) == (SLOT, "backfill", "ops")
    clock.advance(999)
    assert [(await store.trigger("x")).slot for _ in range(2)] == [SLOT + 999, SLOT + 1001]
    listed = await store.triggers(0)
    assert [(t.job, t.slot) for t in listed] == [  # oldest first, then by job and slot
        ("other", SLOT + 1),
        ("report", SLOT + 1),
        ("report", SLOT + 2),
        ("x", SLOT + 999),
        ("x", SLOT + 1001),
    ]
    assert all(is_triggered_slot(t.slot) for t in listed)
    assert [t.job for t in await store.triggers(SLOT + 1)] == ["x", "x"]
    clock.advance(86_400_000)  # a day after x: the next trigger forgets those older than that
    await store.trigger("late")
    assert [t.job for t in await store.triggers(0)] == ["x", "x", "late"]
    assert (await store.claim(request(slot=first.slot, max_late_ms=2 * 86_400_000))).won


async def test_X1_racing_triggers_of_one_millisecond_get_distinct_slots(
    store: PostgresStore,
) -> None:
    made = await asyncio.gather(*(store.trigger("race") for _ in range(12)))
    slots = [t.slot for t in made]
    assert len(set(slots)) == len(slots) and all(is_triggered_slot(s) for s in slots), slots


def _drop_control_tables(schema: str) -> None:
    admin(
        *(
            sql.SQL("DROP TABLE {}").format(sql.Identifier(schema, t))
            for t in Names(schema, TABLE).control_tables
        )
    )


async def test_a_schema_from_before_pauses_is_read_without_them_and_gets_them_on_open(
    schema: str,
) -> None:
    url = url_with(schema)
    owner = PostgresStore.create(url)
    await owner.open()
    await owner.close()
    _drop_control_tables(schema)

    reader = PostgresStore.create(url)
    await reader.open_read_only()
    try:
        assert await reader.pauses() == [] and await reader.triggers(0) == []
        assert f"{TABLE}_pauses" not in tables(schema)  # R1: nothing created
        owner = PostgresStore.create(url)
        await owner.open()  # the next open adds them
        try:
            assert {f"{TABLE}_pauses", f"{TABLE}_triggers"} <= tables(schema)
            pause = await owner.pause("report")
            trigger = await owner.trigger("report")
        finally:
            await owner.close()
        # The reader already open finds them now.
        assert await reader.pauses() == [pause]
        assert await reader.triggers(0) == [trigger]
    finally:
        await reader.close()


async def test_a_changed_control_table_is_corrupt(schema: str) -> None:
    from anarchon import StoreCorrupt

    owner = PostgresStore.create(url_with(schema))
    await owner.open()
    await owner.close()
    admin(
        sql.SQL("ALTER TABLE {} DROP COLUMN paused_by").format(
            sql.Identifier(schema, f"{TABLE}_pauses")
        )
    )
    with pytest.raises(StoreCorrupt, match=f"{TABLE}_pauses"):
        await PostgresStore.create(url_with(schema)).open()


async def test_the_reader_s_grants_read_pauses_and_triggers(schema: str, role: str) -> None:
    owner = PostgresStore.create(url_with(schema))
    await owner.open()
    try:
        pause = await owner.pause("report", reason="freeze")
        trigger = await owner.trigger("report")
    finally:
        await owner.close()
    admin(*read_grants(Names(schema, TABLE), role))
    reader = PostgresStore.create(as_role(role, schema))
    await reader.open_read_only()
    try:
        assert await reader.pauses() == [pause]
        assert await reader.triggers(0) == [trigger]
        for write in (reader.pause("report"), reader.resume("report"), reader.trigger("report")):
            with pytest.raises(ConfigError, match="opened read-only"):
                await write
    finally:
        await reader.close()


async def test_a_reader_without_select_on_the_control_tables_is_told_the_grants(
    schema: str, role: str
) -> None:
    owner = PostgresStore.create(url_with(schema))
    await owner.open()
    await owner.close()
    names = Names(schema, TABLE)
    admin(
        sql.SQL("GRANT USAGE ON SCHEMA {} TO {}").format(
            sql.Identifier(schema), sql.Identifier(role)
        ),
        *(
            sql.SQL("GRANT SELECT ON {} TO {}").format(
                sql.Identifier(schema, t), sql.Identifier(role)
            )
            for t in names.tables
        ),
    )
    with pytest.raises(ConfigError, match=f"SELECT on table {schema}.{TABLE}_pauses"):
        await PostgresStore.create(as_role(role, schema)).open_read_only()


async def test_the_grants_of_a_scheduler_cover_pause_and_trigger(schema: str, role: str) -> None:
    owner = PostgresStore.create(url_with(schema))
    await owner.open()
    await owner.close()
    admin(*_schema.grants(Names(schema, TABLE), role))
    store = PostgresStore.create(as_role(role, schema))
    await store.open()
    try:
        await store.pause("report")
        assert [p.job for p in await store.pauses()] == ["report"]
        assert await store.resume("report")
        await store.trigger("report")
        assert len(await store.triggers(0)) == 1
    finally:
        await store.close()


async def test_pause_is_refused_where_older_claim_functions_stay(schema: str, role: str) -> None:
    """A user that does not own the functions keeps their older bodies, which ignore pauses:
    pausing from it would promise what the claims do not keep."""
    owner = PostgresStore.create(url_with(schema))
    await owner.open()
    await owner.close()
    names = Names(schema, TABLE)
    older = sql.Literal(
        f"anarchon-postgres claim function, body version {_code.PAUSE_BODY_VERSION - 1}"
    )
    admin(
        *(
            sql.SQL("COMMENT ON FUNCTION {}({}) IS {}").format(quoted, sql.SQL(types), older)
            for _, quoted, types in _code.signatures(names)
        ),
        *_schema.grants(names, role),
    )
    store = PostgresStore.create(as_role(role, schema))
    await store.open()
    try:
        with pytest.raises(ConfigError, match="open the store once as their owner"):
            await store.pause("report")
    finally:
        await store.close()


@pytest.mark.processes
async def test_P1_processes_racing_for_a_paused_job_s_slot_none_wins_one_skip_record(
    schema: str,
) -> None:
    url = url_with(schema)
    store = PostgresStore.create(url)
    await store.open()
    now = await store.now_ms()
    slots = [now - now % 1000 - i * 1000 for i in range(20)]
    job = "race" + uuid.uuid4().hex[:6]
    await store.pause(job, reason="frozen")
    spec = race_spec(
        url,
        slots,
        4,
        job=job,
        options={"pool_max_size": 4},
        request={"lease_ms": HOUR_MS, "max_late_ms": HOUR_MS, "overlap": "allow"},
        together=True,
    )
    try:
        with race_processes(spec, 4) as procs:
            await asyncio.to_thread(wait_ready, procs)
            go(procs)
            results = await asyncio.to_thread(lambda: [r for p in procs for r in finish(p)])
        assert len(results) == 4 * 4 * len(slots)
        assert {outcome for _, _, outcome, _ in results} == {"skipped"}, results[:5]
        assert {reason for _, _, _, reason in results} == {"paused: frozen"}
        for slot in slots:
            run = testing.raw_run(POSTGRES_URL, schema, TABLE, "cron", job, slot)
            assert run is not None and run.status is RunStatus.SKIPPED, (slot, run)
            assert run.token in {token for s, token, _, _ in results if s == slot}
        assert sorted(r.slot for r in await store.history(job, 100)) == sorted(slots)
    finally:
        await store.close()
