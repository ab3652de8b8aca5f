"""R1 on PostgreSQL: a store opened read-only creates and changes nothing, and a role with only
``USAGE`` on the schema and ``SELECT`` on the tables reads it, through the real CLI too (issue 26).

The oracle is the server's catalog, read as the superuser behind the store's back: the schema's
row, its relations, columns, functions, constraints and triggers, every table's rows with their
``xmin`` (so even an ``UPDATE`` that writes the same values shows), and the role's settings.
"""

from __future__ import annotations

import asyncio
import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import psycopg
import pytest
from psycopg import sql

from anarchon import (
    ClaimRequest,
    ConfigError,
    RunStatus,
    Scheduler,
    StoreCorrupt,
    StoreNotSetUp,
    StoreUnavailable,
)
from anarchon.cli import EXIT_STORE_NOT_SET_UP
from anarchon_postgres import PostgresStore
from anarchon_test_support.waiting import eventually

from .conftest import POSTGRES_URL, admin, as_role, url_with
from .pgbouncer import PgBouncer

TABLES = (
    "anarchon_runs",
    "anarchon_runs_jobs",
    "anarchon_runs_schema",
    "anarchon_runs_pauses",
    "anarchon_runs_triggers",
)


DOCS = Path(__file__).parents[2] / "docs" / "backends" / "postgresql.md"


def documented_grants() -> list[str]:
    """The ``GRANT`` statements of the docs' "Read-only monitoring" section, for schema ``cron``
    and role ``monitor``."""
    section = DOCS.read_text().split("## Read-only monitoring", 1)[1]
    block = section.split("```sql\n", 1)[1].split("```", 1)[0]
    return [line.rstrip(";") for line in block.splitlines() if line.startswith("GRANT ")]


def grant_reader(schema: str, role: str) -> None:
    """Run the documented GRANTs, word for word, for `schema` and `role`."""
    grants = documented_grants()
    assert len(grants) == 2, grants
    admin(
        *(
            g.replace("SCHEMA cron ", f'SCHEMA "{schema}" ')
            .replace("cron.", f'"{schema}".')
            .replace(" TO monitor", f' TO "{role}"')
            for g in grants
        )
    )


_CATALOG: dict[str, str] = {
    "schema": "SELECT nspname, nspowner::regrole::text, nspacl::text FROM pg_namespace "
    "WHERE nspname = %(s)s",
    "relations": "SELECT c.relname, c.relkind::text, c.relowner::regrole::text, c.relacl::text, "
    "c.relfilenode::text FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace "
    "WHERE n.nspname = %(s)s ORDER BY 1",
    "columns": "SELECT c.relname, a.attnum, a.attname, format_type(a.atttypid, a.atttypmod) "
    "FROM pg_attribute a JOIN pg_class c ON c.oid = a.attrelid "
    "JOIN pg_namespace n ON n.oid = c.relnamespace WHERE n.nspname = %(s)s AND a.attnum > 0 "
    "ORDER BY 1, 2",
    "functions": "SELECT p.proname, pg_get_function_identity_arguments(p.oid), md5(p.prosrc), "
    "p.proacl::text, obj_description(p.oid, 'pg_proc') FROM pg_proc p "
    "JOIN pg_namespace n ON n.oid = p.pronamespace WHERE n.nspname = %(s)s ORDER BY 1, 2",
    "constraints": "SELECT conname, contype::text, conrelid::regclass::text FROM pg_constraint k "
    "JOIN pg_namespace n ON n.oid = k.connamespace WHERE n.nspname = %(s)s ORDER BY 1",
    "triggers": "SELECT t.tgname, t.tgrelid::regclass::text FROM pg_trigger t "
    "JOIN pg_class c ON c.oid = t.tgrelid JOIN pg_namespace n ON n.oid = c.relnamespace "
    "WHERE n.nspname = %(s)s ORDER BY 1",
    "settings": "SELECT setdatabase, setrole, setconfig::text FROM pg_db_role_setting "
    "WHERE setrole IN (0, (SELECT oid FROM pg_roles WHERE rolname = %(r)s)) ORDER BY 1, 2",
}


def catalog(schema: str, role: str = "") -> dict[str, Any]:
    """What the server holds of `schema` (and `role`'s settings), read as the superuser."""
    with psycopg.connect(POSTGRES_URL, autocommit=True) as conn:
        snapshot: dict[str, Any] = {
            name: conn.execute(query, {"s": schema, "r": role}).fetchall()  # type: ignore[call-overload]
            for name, query in _CATALOG.items()
        }
        for (table,) in conn.execute(
            "SELECT c.relname FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace "
            "WHERE n.nspname = %s AND c.relkind = 'r' ORDER BY 1",
            (schema,),
        ).fetchall():
            rows = sql.SQL(
                "SELECT count(*), md5(string_agg(t.xmin::text || ' ' || t.ctid::text || ' ' "
                "|| t::text, ',' ORDER BY t::text)) FROM {} t"
            ).format(sql.Identifier(schema, str(table)))
            snapshot[f"rows of {table}"] = conn.execute(rows).fetchone()
    return snapshot


def schema_exists(schema: str) -> bool:
    with psycopg.connect(POSTGRES_URL, autocommit=True) as conn:
        found = conn.execute("SELECT 1 FROM pg_namespace WHERE nspname = %s", (schema,))
        return found.fetchone() is not None


def cli(*args: str) -> subprocess.CompletedProcess[str]:
    """The real ``anarchon`` command, in a process of its own."""
    return subprocess.run(
        [sys.executable, "-m", "anarchon.cli", *args],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )


async def run_cli(*args: str) -> subprocess.CompletedProcess[str]:
    return await asyncio.to_thread(cli, *args)


async def owner_store(schema: str, **options: Any) -> PostgresStore:
    store = PostgresStore.create(url_with(schema), **options)
    await store.open()
    return store


async def claim_and_finish(store: PostgresStore, job: str, back: int, status: RunStatus) -> None:
    """A run of `job` at the slot `back` seconds ago, won and finished with `status`."""
    slot = (await store.now_ms()) // 1000 * 1000 - back * 1000
    claim = await store.claim(
        ClaimRequest(job=job, slot=slot, instance="owner", max_late_ms=60_000)
    )
    assert claim.won and claim.token is not None
    assert await store.finish(job, slot, claim.token, status, None)


async def read_only(url: str) -> PostgresStore:
    store = PostgresStore.create(url)
    await store.open_read_only()
    return store


# -- the monitoring role, through the CLI ------------------------------------------------------
@pytest.mark.processes
@pytest.mark.slow
async def test_R1_a_select_only_role_runs_history_and_status_and_changes_nothing(
    schema: str, role: str
) -> None:
    """A scheduler (the owner) records runs; the role with the documented GRANTs reads them
    with ``anarchon history`` and ``anarchon status``; the schema is the same after as before."""
    scheduler = Scheduler(url_with(schema), instance="owner-1", environ={})
    calls: dict[str, int] = {"tick": 0, "boom": 0}

    @scheduler.job("* * * * * *", name="tick", max_late="800ms")
    def tick() -> None:
        calls["tick"] += 1

    @scheduler.job("* * * * * *", name="boom", max_late="800ms")
    def boom() -> None:
        calls["boom"] += 1
        raise RuntimeError("boom on purpose")

    async with scheduler:
        await eventually(lambda: min(calls.values()) >= 2, 15, "two runs of each job")
    owner = await owner_store(schema)
    try:
        expected = {job: await owner.history(job) for job in calls}
    finally:
        await owner.close()
    assert {r.status for r in expected["tick"]} >= {RunStatus.SUCCEEDED}
    assert {r.status for r in expected["boom"]} >= {RunStatus.FAILED}

    grant_reader(schema, role)
    url = as_role(role, schema)
    before = catalog(schema, role)

    shown = await run_cli("history", url, "tick", "--json", "--limit", "1000")
    assert shown.returncode == 0, shown.stderr
    runs = json.loads(shown.stdout)
    assert [(r["slot_ms"], r["status"]) for r in runs] == [
        (r.slot, r.status.value) for r in expected["tick"]
    ]
    assert all(r["holder"] == "owner-1" for r in runs if r["status"] == "succeeded")

    status = await run_cli("status", url, "--json")
    assert status.returncode == 0, status.stderr
    jobs = {j["job"]: j for j in json.loads(status.stdout)["jobs"]}
    assert set(jobs) == {"tick", "boom"}
    assert jobs["boom"]["counts"].get("failed", 0) >= 2
    assert jobs["tick"]["counts"].get("succeeded", 0) >= 2

    table = await run_cli("status", url, "--once")
    assert table.returncode == 0, table.stderr
    assert "tick" in table.stdout and "boom" in table.stdout

    # The same role cannot open the store to claim: it really holds only the rights to read.
    with pytest.raises(
        ConfigError, match="lacks privileges anarchon needs: INSERT, UPDATE, DELETE on table"
    ):
        await PostgresStore.create(url).open()

    assert catalog(schema, role) == before


@pytest.mark.processes
async def test_R1_the_cli_on_a_schema_that_does_not_exist_says_so_and_creates_nothing(
    schema: str,
) -> None:
    """As the superuser, who could create anything: the CLI names the schema and ?schema=, exits
    with the code of `StoreNotSetUp`, and the schema still does not exist."""
    url = url_with(schema)
    for args in (("history", url, "tick", "--json"), ("status", url, "--json")):
        result = await run_cli(*args)
        assert result.returncode == EXIT_STORE_NOT_SET_UP, (result.stdout, result.stderr)
        assert f"schema {schema} does not exist" in result.stderr
        assert "?schema= selects the schema" in result.stderr
        assert "Traceback" not in result.stderr
        assert not schema_exists(schema), f"{args[0]} created schema {schema}"


# -- the store itself --------------------------------------------------------------------------
async def test_R1_a_missing_schema_is_not_set_up_twice_and_stays_missing(schema: str) -> None:
    for _ in range(2):
        store = PostgresStore.create(url_with(schema))
        with pytest.raises(StoreNotSetUp, match=rf"schema {schema} does not exist.*\?schema="):
            await store.open_read_only()
        await store.close()
    assert not schema_exists(schema)


@pytest.mark.parametrize("table", ["anarchon_runs", "other_runs"])
async def test_R1_a_schema_without_these_tables_is_not_set_up(schema: str, table: str) -> None:
    """An empty schema, or one holding anarchon's tables under another ``table=``."""
    if table == "anarchon_runs":
        admin(sql.SQL("CREATE SCHEMA {}").format(sql.Identifier(schema)))
    else:
        await (await owner_store(schema)).close()
    before = catalog(schema)
    store = PostgresStore.create(url_with(schema, table=table))
    with pytest.raises(StoreNotSetUp, match=f"schema {schema} has no table {table}.*table="):
        await store.open_read_only()
    await store.close()
    assert catalog(schema) == before


async def test_R1_a_store_missing_one_of_its_tables_is_corrupt_not_repaired(schema: str) -> None:
    await (await owner_store(schema)).close()
    admin(sql.SQL("DROP TABLE {}").format(sql.Identifier(schema, "anarchon_runs_jobs")))
    before = catalog(schema)
    store = PostgresStore.create(url_with(schema))
    with pytest.raises(StoreCorrupt, match=rf"table {schema}\.anarchon_runs_jobs is missing"):
        await store.open_read_only()
    await store.close()
    assert catalog(schema) == before


async def test_R1_the_read_only_store_reads_what_the_owner_wrote(schema: str, role: str) -> None:
    owner = await owner_store(schema)
    try:
        await claim_and_finish(owner, "a", 2, RunStatus.SUCCEEDED)
        await claim_and_finish(owner, "a", 1, RunStatus.FAILED)
        await claim_and_finish(owner, "b", 1, RunStatus.SUCCEEDED)
        expected = (await owner.jobs(), await owner.history("a"), await owner.history("b"))
    finally:
        await owner.close()
    grant_reader(schema, role)
    before = catalog(schema, role)
    reader = await read_only(as_role(role, schema))
    try:
        assert (await reader.jobs(), await reader.history("a"), await reader.history("b")) == (
            expected
        )
        assert await reader.history("a", 1) == expected[1][:1]
        assert await reader.history("never") == []
        assert abs(await reader.now_ms() - await reader.now_ms()) < 60_000
        await reader.open_read_only()  # a second open does nothing
    finally:
        await reader.close()
    assert catalog(schema, role) == before


async def test_R1_every_read_works_where_the_server_refuses_all_writes(schema: str) -> None:
    """As the superuser, in sessions with ``default_transaction_read_only`` (libpq ``options``):
    the open and every read are plain reads, or the server would refuse them."""
    owner = await owner_store(schema)
    try:
        await claim_and_finish(owner, "a", 1, RunStatus.SUCCEEDED)
        expected = await owner.history("a")
    finally:
        await owner.close()
    url = url_with(schema, options="-c%20default_transaction_read_only%3Don")
    reader = await read_only(url)
    try:
        assert (await reader.history("a"), await reader.jobs()) == (expected, ["a"])
        assert await reader.now_ms() > 0
        # The same sessions refuse a write: the setting took effect.
        with pytest.raises(StoreUnavailable, match="is read-only"):
            await claim_and_finish(reader, "a", 0, RunStatus.SUCCEEDED)
    finally:
        await reader.close()


@pytest.mark.parametrize("usage", [True, False], ids=["select-missing", "usage-missing"])
async def test_R1_a_reader_without_a_right_is_given_the_grants_that_fix_it(
    schema: str, role: str, usage: bool
) -> None:
    await (await owner_store(schema)).close()
    if usage:
        admin(f'GRANT USAGE ON SCHEMA "{schema}" TO "{role}"')
        admin(f'GRANT SELECT ON "{schema}".anarchon_runs_schema TO "{role}"')
    store = PostgresStore.create(as_role(role, schema))
    with pytest.raises(ConfigError) as info:
        await store.open_read_only()
    await store.close()
    message = str(info.value)
    assert f"PostgreSQL user '{role}' cannot read the anarchon tables" in message
    shown = TABLES if not usage else [t for t in TABLES if t != "anarchon_runs_schema"]
    lacking = [f"SELECT on table {schema}.{t}" for t in shown]
    if not usage:
        lacking = [f"USAGE on schema {schema}", *lacking]
    assert f"it lacks {'; '.join(lacking)}. As the" in message
    # The statements the message gives are enough.
    admin(*message.split("run: ", 1)[1].split("; "))
    await (await read_only(as_role(role, schema))).close()


async def test_R1_a_right_revoked_while_reading_names_the_rights_of_a_reader(
    schema: str, role: str
) -> None:
    await (await owner_store(schema)).close()
    grant_reader(schema, role)
    reader = await read_only(as_role(role, schema))
    try:
        admin(f'REVOKE SELECT ON "{schema}".anarchon_runs FROM "{role}"')
        with pytest.raises(ConfigError, match="to read the store, the user needs USAGE on the"):
            await reader.history("a")
    finally:
        await reader.close()


async def test_M1_a_select_only_role_reads_the_member_list(schema: str, role: str) -> None:
    """M1 with R1: the documented monitoring grants read the members; the read changes none."""
    owner = await owner_store(schema)
    try:
        member = await owner.announce("web-1:77:abcd", 60_000, {"wins": 3})
        grant_reader(schema, role)
        before = catalog(schema)
        reader = await read_only(as_role(role, schema))
        try:
            assert await reader.members() == [member]
        finally:
            await reader.close()
        assert catalog(schema) == before
    finally:
        await owner.close()


async def test_M1_a_reader_granted_before_members_reads_all_else(schema: str, role: str) -> None:
    """A monitoring role granted SELECT on the tables before the member list existed still
    opens the store read-only and reads runs; only members() is refused, naming the right."""
    owner = await owner_store(schema)
    try:
        await claim_and_finish(owner, "a", 1, RunStatus.SUCCEEDED)
        expected = await owner.history("a")
    finally:
        await owner.close()
    tables = ", ".join(f'"{schema}".{t}' for t in TABLES)  # every table but the members'
    admin(f'GRANT USAGE ON SCHEMA "{schema}" TO "{role}"', f'GRANT SELECT ON {tables} TO "{role}"')
    reader = await read_only(as_role(role, schema))
    try:
        assert await reader.history("a") == expected
        with pytest.raises(ConfigError, match="anarchon_runs_members"):
            await reader.members()
    finally:
        await reader.close()


# -- through PgBouncer -------------------------------------------------------------------------
async def test_R1_read_only_through_pgbouncer(pgbouncer: PgBouncer, schema: str) -> None:
    through = url_with(schema, pgbouncer.url)
    missing = PostgresStore.create(through)
    with pytest.raises(StoreNotSetUp, match=f"schema {schema} does not exist"):
        await missing.open_read_only()
    await missing.close()
    assert not schema_exists(schema)
    owner = await owner_store(schema)
    try:
        await claim_and_finish(owner, "a", 1, RunStatus.SUCCEEDED)
        expected = await owner.history("a")
    finally:
        await owner.close()
    before = catalog(schema)
    reader = await read_only(through)
    try:
        for _ in range(3):  # on whichever server connection PgBouncer gives
            assert await reader.history("a") == expected
            assert await reader.jobs() == ["a"]
    finally:
        await reader.close()
    assert catalog(schema) == before
