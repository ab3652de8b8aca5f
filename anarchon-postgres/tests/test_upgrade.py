"""A rolling upgrade from the release whose claim functions took 13 arguments and arrays.

`legacy/functions_v1.sql` holds those functions as that release created them. A schema that
release made (the same tables, its functions) is opened by this release: it creates its own
functions next to the old ones and leaves those in place, so instances of both releases claim the
same runs side by side, on the same row lock, and one run still has one winner (C1).
"""

from __future__ import annotations

from pathlib import Path

import psycopg
from psycopg import sql

from anarchon import ClaimRequest, Outcome, Overlap
from anarchon_postgres import PostgresStore
from anarchon_postgres._batch import MANY_ARGUMENT_TYPES
from anarchon_postgres._function import ARGUMENT_TYPES

from .conftest import POSTGRES_URL, url_with

LEGACY = Path(__file__).with_name("legacy") / "functions_v1.sql"
OLD_CLAIM = (
    "text, text, bigint, text, text, bigint, bigint, boolean, integer, bigint, integer, integer, "
    "bigint"
)
OLD_MANY = (
    "text, text[], bigint, text[], text[], bigint[], bigint[], boolean[], integer[], bigint[], "
    "integer, integer, bigint"
)


def as_old_release_left_it(schema: str) -> None:
    """This release's functions dropped, the old release's created: the schema as an instance of
    the old release leaves it (the tables did not change between the two)."""
    statements = LEGACY.read_text().replace('"anarchon_legacy"', f'"{schema}"').split("-- next\n")
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
