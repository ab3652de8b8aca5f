"""Bad identifiers, options, credentials and tampered tables: clear errors, nothing overwritten."""

from __future__ import annotations

import logging
import socket
from typing import Any

import psycopg
import pytest
from psycopg import sql

import anarchon
from anarchon import ClaimRequest, ConfigError, StoreCorrupt, StoreUnavailable
from anarchon_postgres import PostgresStore, _schema

from .conftest import POSTGRES_URL, require_server, url_with

SECRET = "s3cr3t-Pa55word"


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@pytest.mark.parametrize(
    ("options", "expected"),
    [
        ({"table": "runs; DROP TABLE x"}, "table 'runs; DROP TABLE x' is invalid: use 1 to 48"),
        ({"table": "1runs"}, "table '1runs' is invalid"),
        ({"table": "x" * 49}, "table 'xxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxx' is 49"),
        ({"schema": "pg_mine"}, "schema 'pg_mine' starts with 'pg_', reserved by PostgreSQL"),
        ({"schema": 'a"b'}, "schema 'a\"b' is invalid"),
        ({"pool_max_size": "0"}, "pool_max_size (0) must be at least 1"),
        ({"pool_min_size": "3", "pool_max_size": "2"}, "at least pool_min_size (3)"),
        ({"statement_timeout_ms": "2h"}, "statement_timeout_ms must be from 0 (no limit)"),
    ],
)
def test_bad_options_say_the_rule(options: dict[str, Any], expected: str) -> None:
    with pytest.raises(ConfigError) as info:
        anarchon.create_store(POSTGRES_URL, **options)
    assert expected in str(info.value)


def test_identifier_rule_is_listed() -> None:
    with pytest.raises(ConfigError) as info:
        anarchon.create_store(POSTGRES_URL + "?table=my-runs")
    assert "ASCII letters, digits or '_', starting with a letter or '_'" in str(info.value)


def test_unknown_option_lists_ours_and_libpq() -> None:
    with pytest.raises(ConfigError) as info:
        anarchon.create_store(POSTGRES_URL + "?tabel=x")
    message = str(info.value)
    assert "unknown option tabel for postgresql://; valid options: durability, history_limit, " in (
        message
    )
    assert (
        "pool_max_size, pool_min_size, prefix, retention_margin_ms, schema, statement_timeout_ms"
        in (message)
    )
    assert "or any libpq connection parameter (" in message and "sslmode" in message


def test_libpq_parameters_pass_through_and_ours_are_stripped() -> None:
    store = anarchon.create_store(
        "postgres://u:pw@db.example:6543/app?sslmode=verify-full&table=jobs_runs&schema=ops"
        "&target_session_attrs=read-write&prefix=app",
        connect_timeout=3,
    )
    assert isinstance(store, PostgresStore)
    params = psycopg.conninfo.conninfo_to_dict(store._conninfo)
    assert params["sslmode"] == "verify-full"
    assert params["target_session_attrs"] == "read-write"
    assert params["connect_timeout"] == "3"
    assert params["options"] == "-c statement_timeout=30000 -c lock_timeout=30000"
    assert (params["host"], params["port"], params["dbname"]) == ("db.example", "6543", "app")
    assert not {"table", "schema", "prefix"} & set(params)
    assert (store.options.table, store.options.schema, store.options.prefix) == (
        "jobs_runs",
        "ops",
        "app",
    )
    assert "pw" not in repr(store) and "u:***@" in repr(store)


async def test_refused_connection_is_unavailable_without_the_password(
    caplog: pytest.LogCaptureFixture,
) -> None:
    url = f"postgresql://postgres:{SECRET}@127.0.0.1:{free_port()}/test?password={SECRET}"
    caplog.set_level(logging.DEBUG)
    with pytest.raises(StoreUnavailable) as info:
        await anarchon.connect(url)
    message = str(info.value)
    assert message.startswith("PostgreSQL at postgresql://postgres:***@127.0.0.1:")
    assert "cannot be reached" in message and "password (not shown)" in message
    assert SECRET not in message and SECRET not in caplog.text


async def test_wrong_credentials_are_an_error_without_the_password(
    schema: str, caplog: pytest.LogCaptureFixture
) -> None:
    # The test server trusts local logins, so a user that does not exist is the wrong credential.
    base = POSTGRES_URL.split("://", 1)[1].split("@", 1)[-1]
    url = f"postgresql://nobody_{schema}:{SECRET}@{base}?schema={schema}"
    caplog.set_level(logging.DEBUG)
    # No retry can fix a refused login: a ConfigError, so a scheduler fails its start at once.
    with pytest.raises(ConfigError, match="refused the login") as info:
        await anarchon.connect(url)
    message = str(info.value)
    assert f"nobody_{schema}:***@" in message and f'role "nobody_{schema}"' in message
    assert SECRET not in message and SECRET not in caplog.text
    assert SECRET not in repr(info.value.__cause__) and info.value.__suppress_context__


async def test_a_read_only_server_is_named_and_the_primary_asked_for(schema: str) -> None:
    # What a hot standby answers (SQLSTATE 25006), from a session that is read-only by default.
    await make_store(schema)
    read_only = url_with(schema, options="-c%20default_transaction_read_only%3Don")
    store = PostgresStore.create(read_only)
    try:
        await store.open()  # the tables exist: opening only reads
        now = await store.now_ms()
        for attempt in (
            store.claim(ClaimRequest(job="k", slot=now, instance="a")),
            store.claim_many([ClaimRequest(job="m", slot=now, instance="a")]),
        ):
            with pytest.raises(StoreUnavailable) as info:
                await attempt
            message = str(info.value)
            assert "is read-only (a hot standby" in message, message
            assert "point the URL at the primary" in message and "SELECT" not in message
    finally:
        await store.close()


async def make_store(schema: str) -> None:
    store = PostgresStore.create(url_with(schema))
    await store.open()
    await store.claim(ClaimRequest(job="keep", slot=await store.now_ms(), instance="a"))
    await store.close()


def run_sql(*statements: str, schema: str) -> None:
    with psycopg.connect(POSTGRES_URL, autocommit=True) as conn:
        conn.execute(sql.SQL("SET search_path = {}").format(sql.Identifier(schema)))
        for statement in statements:
            conn.execute(statement)  # type: ignore[arg-type]


def dump(schema: str) -> list[tuple[object, ...]]:
    """Every anarchon table's rows and columns, to compare before and after."""
    with psycopg.connect(POSTGRES_URL, autocommit=True) as conn:
        tables = conn.execute(
            "SELECT table_name, string_agg(column_name, ',' ORDER BY ordinal_position) "
            "FROM information_schema.columns WHERE table_schema = %s GROUP BY table_name "
            "ORDER BY table_name",
            (schema,),
        ).fetchall()
        result: list[tuple[object, ...]] = list(tables)
        for name, _ in tables:
            rows = conn.execute(
                sql.SQL("SELECT * FROM {} ORDER BY 1, 2").format(sql.Identifier(schema, str(name)))
            ).fetchall()
            result.extend(sorted(map(repr, rows)))  # type: ignore[arg-type]
    return result


@pytest.mark.parametrize(
    ("statements", "expected"),
    [
        (
            ["ALTER TABLE anarchon_runs DROP COLUMN error"],
            "anarchon_runs has missing column(s) error",
        ),
        (["ALTER TABLE anarchon_runs_jobs ADD COLUMN note text"], "unknown column(s) note"),
        (
            ["ALTER TABLE anarchon_runs ALTER COLUMN attempt TYPE bigint"],
            "anarchon_runs has column(s) of the wrong type attempt (bigint)",
        ),
        (
            ["UPDATE anarchon_runs_schema SET version = 7"],
            (
                "anarchon_runs_schema says schema version 7; this anarchon-postgres reads "
                "version 1: upgrade anarchon-postgres"
            ),
        ),
        (["DELETE FROM anarchon_runs_schema"], "anarchon_runs_schema has 0 rows for component"),
        (["DROP TABLE anarchon_runs_jobs"], "anarchon_runs_jobs is missing while other anarchon"),
    ],
    ids=["missing-column", "extra-column", "wrong-type", "newer-version", "no-version", "no-table"],
)
async def test_tampered_tables_are_corrupt_and_untouched(
    schema: str, statements: list[str], expected: str
) -> None:
    await make_store(schema)
    run_sql(*statements, schema=schema)
    before = dump(schema)
    with pytest.raises(StoreCorrupt) as info:
        await make_store(schema)
    assert f"table {schema}." in str(info.value)
    assert expected in str(info.value)
    assert dump(schema) == before


async def test_foreign_table_of_the_same_name_is_untouched(schema: str) -> None:
    run_sql(f'CREATE SCHEMA "{schema}"', schema="public")
    run_sql(
        "CREATE TABLE anarchon_runs (id int PRIMARY KEY, payload text)",
        "INSERT INTO anarchon_runs VALUES (1, 'precious')",
        schema=schema,
    )
    with pytest.raises(StoreCorrupt) as info:
        await make_store(schema)
    assert f"table {schema}.anarchon_runs is missing while" in str(info.value) or (
        "missing column(s) prefix, job, slot" in str(info.value)
    )
    assert dump(schema)[-1] == "(1, 'precious')"


async def test_a_dropped_claim_function_is_recreated(schema: str) -> None:
    await make_store(schema)
    run_sql("DROP FUNCTION anarchon_runs_claim", schema=schema)
    await make_store(schema)


async def test_unknown_status_in_a_row_is_corrupt_naming_job_and_slot(schema: str) -> None:
    store = PostgresStore.create(url_with(schema))
    await store.open()
    slot = await store.now_ms()
    request = ClaimRequest(job="sync", slot=slot, instance="a")
    await store.claim(request)
    run_sql("UPDATE anarchon_runs SET status = 'paused'", schema=schema)
    for call in (store.claim(request), store.check(request), store.history("sync")):
        with pytest.raises(StoreCorrupt) as info:
            await call
        assert f"run of job 'sync' at slot {slot}" in str(info.value)
        assert "status 'paused'" in str(info.value)
    await store.close()


async def test_an_older_schema_is_migrated_forward(
    schema: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    await make_store(schema)

    def add_index(names: Any) -> list[sql.Composed]:
        return [
            sql.SQL("CREATE INDEX {} ON {} (holder)").format(
                sql.Identifier(f"{names.table}_holder"), names.runs
            )
        ]

    monkeypatch.setattr(_schema, "SCHEMA_VERSION", 2)
    monkeypatch.setattr(_schema, "MIGRATIONS", {1: add_index})
    await make_store(schema)
    with psycopg.connect(POSTGRES_URL) as conn:
        version = conn.execute(
            sql.SQL("SELECT version FROM {}").format(sql.Identifier(schema, "anarchon_runs_schema"))
        ).fetchone()
        index = conn.execute("SELECT to_regclass(%s)", (f"{schema}.anarchon_runs_holder",))
        assert version == (2,) and index.fetchone() != (None,)


async def test_calls_before_open_say_how_to_open() -> None:
    store = PostgresStore.create(POSTGRES_URL)
    with pytest.raises(StoreUnavailable, match="is not open"):
        await store.claim(ClaimRequest(job="j", slot=1, instance="a"))


async def test_an_unknown_database_is_a_config_error_at_once() -> None:
    require_server()
    base = POSTGRES_URL.rsplit("/", 1)[0]
    with pytest.raises(ConfigError, match=r'refused the login .*database "no_such_db"'):
        await anarchon.connect(f"{base}/no_such_db")
