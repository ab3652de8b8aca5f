"""Rolling upgrades from the releases whose claim functions had other signatures.

`legacy/functions_v1.sql` holds the functions of the release that took 13 arguments and arrays,
`legacy/functions_v2.sql` those of the release before the ledger (``<table>_claim(text)``, which
answered late and overlap without writing), each as that release created them. A schema such a
release made (the same tables, its functions) is opened by this release: it creates its own
functions next to the old ones and leaves those in place, so instances of both releases claim the
same runs side by side, on the same row lock, and one run still has one winner (C1). An older
instance never wins a slot this release recorded as skipped (S1): it answers ``done`` with status
``skipped``, which its Python refuses as `StoreCorrupt` (fail closed).
"""

from __future__ import annotations

from pathlib import Path

import psycopg
from psycopg import sql

from anarchon import ClaimRequest, Outcome, Overlap
from anarchon_postgres import PostgresStore
from anarchon_postgres._function import ARGUMENT_TYPES
from anarchon_postgres._many_function import MANY_ARGUMENT_TYPES

from .conftest import POSTGRES_URL, url_with

LEGACY = Path(__file__).with_name("legacy") / "functions_v1.sql"
LEDGERLESS = Path(__file__).with_name("legacy") / "functions_v2.sql"
LEDGERLESS_CLAIM = "text"
LEDGERLESS_MANY = (
    "text, bigint, text, text, text, text[], bigint[], bigint[], boolean[], integer[], bigint[], "
    "integer, text, bigint"
)
OLD_CLAIM = (
    "text, text, bigint, text, text, bigint, bigint, boolean, integer, bigint, integer, integer, "
    "bigint"
)
OLD_MANY = (
    "text, text[], bigint, text[], text[], bigint[], bigint[], boolean[], integer[], bigint[], "
    "integer, integer, bigint"
)


def as_old_release_left_it(schema: str, legacy: Path = LEGACY) -> None:
    """This release's functions dropped, the old release's created: the schema as an instance of
    the old release leaves it (the tables did not change between the two)."""
    statements = legacy.read_text().replace('"anarchon_legacy"', f'"{schema}"').split("-- next\n")
    with psycopg.connect(POSTGRES_URL, autocommit=True) as conn:
        conn.execute(
            sql.SQL("DROP FUNCTION {}.anarchon_runs_claim_many({})").format(
                sql.Identifier(schema), sql.SQL(MANY_ARGUMENT_TYPES)
            )
        )
        conn.execute(
            sql.SQL("DROP FUNCTION {}.anarchon_runs_claim({})").format(
                sql.Identifier(schema), sql.SQL(ARGUMENT_TYPES)
            )
        )
        for statement in statements:
            conn.execute(statement)  # type: ignore[call-overload]


def functions(schema: str) -> set[str]:
    with psycopg.connect(POSTGRES_URL, autocommit=True) as conn:
        rows = conn.execute(
            "SELECT p.proname || '(' || pg_catalog.oidvectortypes(p.proargtypes) || ')' "
            "FROM pg_catalog.pg_proc p JOIN pg_catalog.pg_namespace n ON n.oid = p.pronamespace "
            "WHERE n.nspname = %s",
            (schema,),
        ).fetchall()
    return {str(row[0]) for row in rows}


def old_claim(schema: str, request: ClaimRequest) -> tuple[object, ...]:
    """A claim as the old release sends it (its `_args`: keep_until with a 60 s margin)."""
    keep = request.slot + request.max_late_ms + request.attempts * request.lease_ms + 60_000
    with psycopg.connect(POSTGRES_URL, autocommit=True, prepare_threshold=None) as conn:
        row = conn.execute(
            sql.SQL(
                "SELECT * FROM {}.anarchon_runs_claim(%s, %s, %s, %s, %s, %s, %s, %s, %s, %s, "
                "%s, %s, %s)"
            ).format(sql.Identifier(schema)),
            (
                "cron",
                request.job,
                request.slot,
                request.token,
                request.instance,
                request.lease_ms,
                request.max_late_ms,
                request.overlap is Overlap.SKIP,
                request.attempts,
                keep,
                1000,
                30_000,
                None,
            ),
        ).fetchone()
    assert row is not None
    return tuple(row)


async def test_opening_an_old_schema_adds_the_new_functions_and_keeps_the_old(
    schema: str,
) -> None:
    first = PostgresStore.create(url_with(schema))
    await first.open()
    await first.close()
    as_old_release_left_it(schema)
    old = {f"anarchon_runs_claim({OLD_CLAIM})", f"anarchon_runs_claim_many({OLD_MANY})"}
    assert functions(schema) == old

    store = PostgresStore.create(url_with(schema))
    await store.open()
    try:
        assert functions(schema) == old | {
            f"anarchon_runs_claim({ARGUMENT_TYPES})",
            f"anarchon_runs_claim_many({MANY_ARGUMENT_TYPES})",
        }
        now = await store.now_ms()
        assert (await store.claim(ClaimRequest(job="sync", slot=now, instance="new"))).won
    finally:
        await store.close()


async def test_old_and_new_instances_share_runs_with_one_winner(schema: str) -> None:
    first = PostgresStore.create(url_with(schema))
    await first.open()
    await first.close()
    as_old_release_left_it(schema)
    store = PostgresStore.create(url_with(schema))
    await store.open()
    try:
        now = await store.now_ms()
        # The old instance first: the new one finds the run it won.
        old_first = ClaimRequest(job="sync", slot=now - 1000, instance="old")
        outcome, attempt, token, holder = old_claim(schema, old_first)[:4]
        assert (outcome, attempt, token, holder) == ("won", 1, old_first.token, "old")
        after = await store.claim(ClaimRequest(job="sync", slot=now - 1000, instance="new"))
        assert (after.outcome, after.token, after.holder) == (
            Outcome.RUNNING,
            old_first.token,
            "old",
        )
        # The new instance first: the old one finds the run it won.
        new_first = ClaimRequest(job="report", slot=now, instance="new")
        assert (await store.claim(new_first)).won
        outcome, attempt, token, holder = old_claim(
            schema, ClaimRequest(job="report", slot=now, instance="old")
        )[:4]
        assert (outcome, attempt, token, holder) == ("running", 1, new_first.token, "new")
        # The old batch function still runs against the same rows.
        old_token = "0" * 32
        with psycopg.connect(POSTGRES_URL, autocommit=True, prepare_threshold=None) as conn:
            rows = conn.execute(
                sql.SQL(
                    "SELECT o_n, o_outcome, o_token FROM {}.anarchon_runs_claim_many(%s, %s, %s, "
                    "%s, %s, %s, %s, %s, %s, %s, %s, %s, %s)"
                ).format(sql.Identifier(schema)),
                (
                    "cron",
                    ["report", "other"],
                    now,
                    ["1" * 32, old_token],
                    ["old", "old"],
                    [60_000, 60_000],
                    [60_000, 60_000],
                    [True, True],
                    [3, 3],
                    [now + 300_000, now + 300_000],
                    1000,
                    30_000,
                    None,
                ),
            ).fetchall()
        assert sorted(rows) == [(1, "running", new_first.token), (2, "won", old_token)]
        other = await store.claim(ClaimRequest(job="other", slot=now, instance="new"))
        assert (other.outcome, other.token, other.holder) == (Outcome.RUNNING, old_token, "old")
    finally:
        await store.close()


# -- from the release before the ledger (body version 2, `<table>_claim(text)`) ----------------
def ledgerless_claim(schema: str, store: PostgresStore, request: ClaimRequest) -> list[str]:
    """A claim as the release before the ledger sends it (the same packed request, one argument),
    and its answer's fields."""
    with psycopg.connect(POSTGRES_URL, autocommit=True, prepare_threshold=None) as conn:
        row = conn.execute(
            sql.SQL("SELECT {}.anarchon_runs_claim(%s::text)").format(sql.Identifier(schema)),
            (store._packed(request),),
        ).fetchone()
    assert row is not None
    return str(row[0]).split(" ", 7)


async def ledgerless_schema(schema: str) -> PostgresStore:
    """A schema as the release before the ledger left it, opened by this release."""
    first = PostgresStore.create(url_with(schema))
    await first.open()
    await first.close()
    as_old_release_left_it(schema, LEDGERLESS)
    store = PostgresStore.create(url_with(schema))
    await store.open()
    return store


async def test_opening_a_ledgerless_schema_adds_the_new_functions_and_keeps_the_old(
    schema: str,
) -> None:
    store = await ledgerless_schema(schema)
    try:
        assert functions(schema) == {
            f"anarchon_runs_claim({LEDGERLESS_CLAIM})",
            f"anarchon_runs_claim_many({LEDGERLESS_MANY})",
            f"anarchon_runs_claim({ARGUMENT_TYPES})",
            f"anarchon_runs_claim_many({MANY_ARGUMENT_TYPES})",
        }
        now = await store.now_ms()
        assert (await store.claim(ClaimRequest(job="sync", slot=now, instance="new"))).won
        batch = [ClaimRequest(job=j, slot=now, instance="new") for j in ("a", "b")]
        assert all(c.won for c in await store.claim_many(batch))
    finally:
        await store.close()


async def test_ledgerless_and_new_instances_share_runs_with_one_winner(schema: str) -> None:
    store = await ledgerless_schema(schema)
    try:
        now = await store.now_ms()
        # The old instance first: the new one finds the run it won.
        old_first = ClaimRequest(job="sync", slot=now - 1000, instance="old")
        answer = ledgerless_claim(schema, store, old_first)
        assert (answer[0], answer[1], answer[6], answer[7]) == ("won", "1", old_first.token, "old")
        after = await store.claim(ClaimRequest(job="sync", slot=now - 1000, instance="new"))
        assert (after.outcome, after.token, after.holder) == (
            Outcome.RUNNING,
            old_first.token,
            "old",
        )
        # The new instance first: the old one finds the run it won.
        new_first = ClaimRequest(job="report", slot=now, instance="new")
        assert (await store.claim(new_first)).won
        answer = ledgerless_claim(schema, store, ClaimRequest(job="report", slot=now, instance="o"))
        assert (answer[0], answer[6], answer[7]) == ("running", new_first.token, "new")
    finally:
        await store.close()


async def test_a_ledgerless_instance_never_wins_a_recorded_skip(schema: str) -> None:
    store = await ledgerless_schema(schema)
    try:
        now = await store.now_ms()
        assert (await store.claim(ClaimRequest(job="sync", slot=now, instance="new"))).won
        overlap = ClaimRequest(job="sync", slot=now + 1, instance="new")
        recorded = await store.claim(overlap)
        assert recorded.outcome is Outcome.SKIPPED and recorded.token == overlap.token
        # Overlap allowed, so nothing but the record keeps the old release from winning it.
        request = ClaimRequest(job="sync", slot=now + 1, instance="old", overlap=Overlap.ALLOW)
        answer = ledgerless_claim(schema, store, request)
        assert (answer[0], answer[3], answer[6], answer[7]) == (
            "done",
            "skipped",
            overlap.token,
            "new",
        )
        with psycopg.connect(POSTGRES_URL, autocommit=True, prepare_threshold=None) as conn:
            rows = conn.execute(
                sql.SQL(
                    "SELECT o_n, o_answer FROM {}.anarchon_runs_claim_many(%s, %s, %s, %s, %s, "
                    "%s, %s, %s, %s, %s, %s, %s, %s, %s)"
                ).format(sql.Identifier(schema)),
                ("cron", now + 1, "sync", "1" * 32, "1", ["old"], [60_000], [60_000], [False],
                 [3], [now + 300_000], 1000, "30s", None),
            ).fetchall()  # fmt: skip
        assert [(n, str(a).split(" ")[0]) for n, a in rows] == [(1, "done")]
        # The old release's late answer writes nothing; this release records the slot after it.
        late = ClaimRequest(job="late", slot=now - 120_000, instance="old")
        assert ledgerless_claim(schema, store, late)[0] == "late"
        assert (await store.history("late")) == []
        again = await store.claim(ClaimRequest(job="late", slot=now - 120_000, instance="new"))
        assert again.outcome is Outcome.SKIPPED and again.reason.startswith("late: "), again
    finally:
        await store.close()
