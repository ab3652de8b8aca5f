"""The tables and the claim functions, created once under an advisory lock and checked on open.

The usual open is one catalog read of the tables and one of the functions: every table there,
with our columns, at our version, and both functions present with this release's signatures and
a body at least as new as this release's (see `_code`). Otherwise one transaction takes
``pg_advisory_xact_lock`` (concurrent ``CREATE TABLE IF NOT EXISTS`` can fail, and many instances
start at once), looks again, and creates what is missing, migrates an older version forward, or
replaces function bodies older than this release's. Tables that exist but are not ours (a missing
or unknown column, a newer version, some tables without the others) are never touched: opening
raises `StoreCorrupt` naming the table.

The control tables (``<table>_pauses`` and ``<table>_triggers``, rules P1 and X1) came after
version 1 and do not change it: a release that does not know them works on its own tables as
before (and, once this release has replaced the claim functions, its claims keep P1 too), so
instances of both run side by side during a rolling upgrade. A schema without them gets them on
the next open, under the advisory lock, like a missing claim function.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

from psycopg import AsyncConnection, IsolationLevel, sql

from anarchon import ConfigError, StoreCorrupt

from ._code import functions_found, install, keep_pauses, signatures, warn_not_owned
from ._names import Names
from ._plpgsql import source

__all__ = [
    "COMPONENT",
    "MIGRATIONS",
    "SCHEMA_VERSION",
    "check_access",
    "ensure_schema",
    "grants",
    "table_privileges",
]

SCHEMA_VERSION = 1
COMPONENT = "postgres"

Statements = Callable[[Names], Sequence[sql.Composed]]

MIGRATIONS: dict[int, Statements] = {}
"""Forward migrations: ``MIGRATIONS[n]`` takes the schema from version n to n + 1 (run in order,
in the creating transaction, under the advisory lock; each release that changes the schema adds
one and bumps `SCHEMA_VERSION`). The claim functions are always replaced after migrating."""

# table -> {column: type as format_type() shows it}, in order
_RUNS = {
    "prefix": "text",
    "job": "text",
    "slot": "bigint",
    "status": "text",
    "attempt": "integer",
    "token": "text",
    "holder": "text",
    "claimed_at": "bigint",
    "lease_until": "bigint",
    "finished_at": "bigint",
    "error": "text",
    "keep_until": "bigint",
}
_JOBS = {"prefix": "text", "job": "text", "floor": "bigint"}
_VERSION = {"component": "text", "version": "integer"}
_PAUSES = {
    "prefix": "text",
    "job": "text",
    "since_ms": "bigint",
    "until_ms": "bigint",
    "reason": "text",
    "paused_by": "text",
}
_TRIGGERS = {
    "prefix": "text",
    "job": "text",
    "slot": "bigint",
    "requested_at": "bigint",
    "reason": "text",
    "requested_by": "text",
}


def _columns(names: Names) -> dict[str, dict[str, str]]:
    return {names.table: _RUNS, names.jobs_table: _JOBS, names.version_table: _VERSION}


_MEMBERS = {
    "prefix": "text",
    "instance": "text",
    "started_ms": "bigint",
    "seen_ms": "bigint",
    "until_ms": "bigint",
    "stats": "text",
}


def _control_columns(names: Names) -> dict[str, dict[str, str]]:
    return {
        names.pauses_table: _PAUSES,
        names.triggers_table: _TRIGGERS,
        names.members_table: _MEMBERS,
    }


def _create(names: Names) -> list[sql.Composed]:
    """The statements of ``_sql/tables.sql``, each formatted with the quoted names."""
    values = {
        "runs": names.runs,
        "jobs": names.jobs,
        "version": names.version,
        "index": sql.Identifier(f"{names.table}_live"),
        "component": sql.Literal(COMPONENT),
        "schema_version": sql.Literal(SCHEMA_VERSION),
    }
    statements = (s.strip() for s in source("tables.sql").split(";\n"))
    return [sql.SQL(s).format(**values) for s in statements if s]


def _create_control(names: Names) -> list[sql.Composed]:
    """The statements of ``_sql/control.sql`` (each IF NOT EXISTS), with the quoted names."""
    values = {
        "pauses": names.pauses,
        "triggers": names.triggers,
        "triggers_new": sql.Identifier(f"{names.triggers_table}_new"),
    }
    statements = (s.strip() for s in source("control.sql").split(";\n"))
    members = (s.strip() for s in source("members.sql").split(";\n"))
    return [
        *(sql.SQL(s).format(**values) for s in statements if s),
        *(sql.SQL(s).format(members=names.members) for s in members if s),
    ]


_CATALOG = """
SELECT c.relname, c.relkind::text, a.attname::text, format_type(a.atttypid, a.atttypmod)
FROM pg_catalog.pg_class c
JOIN pg_catalog.pg_namespace n ON n.oid = c.relnamespace
LEFT JOIN pg_catalog.pg_attribute a ON a.attrelid = c.oid AND a.attnum > 0 AND NOT a.attisdropped
WHERE n.nspname = %s AND c.relname = ANY(%s)
ORDER BY c.relname, a.attnum
"""


async def _catalog(
    conn: AsyncConnection[tuple[object, ...]], names: Names
) -> dict[str, list[tuple[str, str]]]:
    """Our tables that exist: name -> [(column, type)], or a list with ('', kind) for a non-table."""
    cur = await conn.execute(_CATALOG, (names.schema, list(names.all_tables)))
    found: dict[str, list[tuple[str, str]]] = {}
    for relname, kind, column, kind_of in await cur.fetchall():
        entry = found.setdefault(str(relname), [])
        if kind not in ("r", "p"):
            entry.append(("", f"relkind {kind}"))
        elif column is not None:
            entry.append((str(column), str(kind_of)))
    return found


async def ensure_schema(conn: AsyncConnection[tuple[object, ...]], names: Names) -> bool:
    """Create or check the schema on `conn` (autocommit). See the module docstring. Returns
    whether the claim functions keep P1 (False: an older body that the user does not own)."""
    found = await _catalog(conn, names)
    if len(found) == len(names.all_tables):
        _verify_tables(found, names)
        await check_access(conn, names)
        if await _version(conn, names) == SCHEMA_VERSION:
            functions = await functions_found(conn, names)
            if all(f.current or (f.exists and not f.owned) for f in functions):
                warn_not_owned(functions, names)
                return keep_pauses(functions)
    await conn.set_isolation_level(IsolationLevel.READ_COMMITTED)  # the catalog after the lock
    async with conn.transaction():
        await conn.execute(
            "SELECT pg_advisory_xact_lock(hashtext(%s)::bigint)", (names.lock_key(),)
        )
        found = await _catalog(conn, names)
        if not found:
            await _check_create(conn, names)
            await _create_all(conn, names)
            return True
        _verify_tables(found, names)
        if not all(t in found for t in names.control_tables):  # a schema from before them
            await _check_create(conn, names, what="create the pause and trigger tables")
            for statement in _create_control(names):
                await conn.execute(statement)
        version = await _version(conn, names)
        if version < SCHEMA_VERSION:
            for step in range(version, SCHEMA_VERSION):
                for statement in MIGRATIONS[step](names):
                    await conn.execute(statement)
            await conn.execute(
                sql.SQL("UPDATE {version} SET version = %s WHERE component = %s").format(
                    version=names.version
                ),
                (SCHEMA_VERSION, COMPONENT),
            )
            await install(conn, names, None)
            return True
        # Code, not data: creating a dropped function (or one that a newer release added) and
        # replacing an older body overwrite nothing.
        functions = await functions_found(conn, names)
        if not all(f.exists for f in functions):
            await _check_create(conn, names, what="create the missing claim function")
        await install(conn, names, functions)
        warn_not_owned(functions, names)
        return keep_pauses(functions)


async def _create_all(conn: AsyncConnection[tuple[object, ...]], names: Names) -> None:
    exists = await conn.execute(
        "SELECT 1 FROM pg_catalog.pg_namespace WHERE nspname = %s", (names.schema,)
    )
    if await exists.fetchone() is None:
        await conn.execute(sql.SQL("CREATE SCHEMA {}").format(sql.Identifier(names.schema)))
    for statement in [*_create(names), *_create_control(names)]:
        await conn.execute(statement)
    await install(conn, names, None)


def _verify_tables(found: dict[str, list[tuple[str, str]]], names: Names) -> None:
    """The tables that exist are ours: every core table, with our columns; a control table,
    when it exists (a schema made before them lacks them), with ours too."""
    fix = (
        "it was not created by this anarchon-postgres; use another table= or schema= option, "
        "or drop the anarchon tables if they hold nothing you need"
    )
    control = {t: c for t, c in _control_columns(names).items() if t in found}
    for table, columns in {**_columns(names), **control}.items():
        where = f"table {names.shown(table)}"
        if table not in found:
            raise StoreCorrupt(f"{where} is missing while other anarchon tables exist; {fix}")
        have = dict(found[table])
        if "" in have:
            raise StoreCorrupt(f"{where} is not a table ({have['']}); {fix}")
        problems = []
        missing = [c for c in columns if c not in have]
        extra = [c for c in have if c not in columns]
        wrong = [f"{c} ({have[c]})" for c in columns if c in have and have[c] != columns[c]]
        if missing:
            problems.append("missing column(s) " + ", ".join(missing))
        if extra:
            problems.append("unknown column(s) " + ", ".join(extra))
        if wrong:
            problems.append("column(s) of the wrong type " + ", ".join(wrong))
        if problems:
            raise StoreCorrupt(f"{where} has {' and '.join(problems)}; {fix}")


async def _version(conn: AsyncConnection[tuple[object, ...]], names: Names) -> int:
    cur = await conn.execute(
        sql.SQL("SELECT version FROM {version} WHERE component = %s").format(version=names.version),
        (COMPONENT,),
    )
    rows = await cur.fetchall()
    where = f"table {names.shown(names.version_table)}"
    if len(rows) != 1 or not isinstance(rows[0][0], int):
        raise StoreCorrupt(
            f"{where} has {len(rows)} rows for component {COMPONENT!r} (expected one with the "
            f"schema version); anarchon does not touch it: repair the row or use another table="
        )
    version = rows[0][0]
    if version > SCHEMA_VERSION:
        raise StoreCorrupt(
            f"{where} says schema version {version}; this anarchon-postgres reads version "
            f"{SCHEMA_VERSION}: upgrade anarchon-postgres on every instance"
        )
    if version < 1 or (
        version < SCHEMA_VERSION
        and any(step not in MIGRATIONS for step in range(version, SCHEMA_VERSION))
    ):
        raise StoreCorrupt(
            f"{where} says schema version {version}, which no release of anarchon-postgres "
            f"wrote or can migrate to version {SCHEMA_VERSION}; repair the row or use another table="
        )
    return version


# -- privileges ------------------------------------------------------------------------------
def table_privileges(names: Names) -> dict[str, tuple[str, ...]]:
    """What a user that runs the store needs on each table (the claim functions run with the
    caller's rights): runs are read, inserted, updated and deleted (retention, L11); job rows are
    inserted and locked (``FOR UPDATE`` needs UPDATE) and their floor raised; the version is read;
    pauses are read by every claim and written by pause and resume; triggers are read by every
    instance, written by trigger, which also deletes those older than a day; members (M1) are
    upserted by each announce, which deletes those whose ttl ran out, and by leave."""
    return {
        names.table: ("SELECT", "INSERT", "UPDATE", "DELETE"),
        names.jobs_table: ("SELECT", "INSERT", "UPDATE"),
        names.version_table: ("SELECT",),
        names.pauses_table: ("SELECT", "INSERT", "UPDATE", "DELETE"),
        names.triggers_table: ("SELECT", "INSERT", "DELETE"),
        names.members_table: ("SELECT", "INSERT", "UPDATE", "DELETE"),
    }


def grants(names: Names, role: str) -> list[str]:
    """The ``GRANT`` statements that let `role` run a store whose objects exist."""
    quote = _quote
    schema = quote(names.schema)
    statements = [f"GRANT USAGE ON SCHEMA {schema} TO {quote(role)}"]
    for table, privileges in table_privileges(names).items():
        statements.append(
            f"GRANT {', '.join(privileges)} ON {schema}.{quote(table)} TO {quote(role)}"
        )
    for function, _, types in signatures(names):
        statements.append(
            f"GRANT EXECUTE ON FUNCTION {schema}.{quote(function)}({types}) TO {quote(role)}"
        )
    return statements


def _quote(name: str) -> str:
    return '"' + name.replace('"', '""') + '"'


_ACCESS = """
SELECT current_user::text,
       has_schema_privilege(n.oid, 'USAGE'),
       (SELECT coalesce(json_object_agg(c.relname, json_build_object(
            'SELECT', has_table_privilege(c.oid, 'SELECT'),
            'INSERT', has_table_privilege(c.oid, 'INSERT'),
            'UPDATE', has_table_privilege(c.oid, 'UPDATE'),
            'DELETE', has_table_privilege(c.oid, 'DELETE'))), '{}'::json)
          FROM pg_catalog.pg_class c WHERE c.relnamespace = n.oid AND c.relname = ANY(%s)),
       (SELECT coalesce(json_object_agg(p.proname, has_function_privilege(p.oid, 'EXECUTE')),
                         '{}'::json)
          FROM pg_catalog.pg_proc p
          JOIN unnest(%s::text[], %s::text[]) AS f(name, args)
            ON p.proname = f.name AND pg_catalog.oidvectortypes(p.proargtypes) = f.args
         WHERE p.pronamespace = n.oid)
FROM pg_catalog.pg_namespace n WHERE n.nspname = %s
"""


async def check_access(conn: AsyncConnection[tuple[object, ...]], names: Names) -> None:
    """`ConfigError` naming every privilege the current user lacks on existing tables and the
    claim functions, with the ``GRANT`` statements that fix it. Checked by OID, so a missing
    ``USAGE`` on the schema is reported, not raised by a name lookup."""
    wanted = signatures(names)
    cur = await conn.execute(
        _ACCESS,
        (
            list(names.all_tables),
            [name for name, _, _ in wanted],
            [types for _, _, types in wanted],
            names.schema,
        ),
    )
    row = await cur.fetchone()
    if row is None:  # the schema vanished since the catalog read: creation will report it
        return
    role, usage, tables, execute = row
    assert isinstance(tables, dict) and isinstance(execute, dict)
    missing = [] if usage else [f"USAGE on schema {names.schema}"]
    for table, needed in table_privileges(names).items():
        have = tables.get(table, {})
        lacking = [p for p in needed if not have.get(p, True)]
        if lacking:
            missing.append(f"{', '.join(lacking)} on table {names.shown(table)}")
    # A function that does not exist yet is created (by a user that may), not reported here.
    missing.extend(
        f"EXECUTE on function {names.shown(f)}" for f in names.functions if execute.get(f) is False
    )
    if missing:
        raise ConfigError(
            f"PostgreSQL user {role!r} lacks privileges anarchon needs: {'; '.join(missing)}. "
            "As the tables' owner (or a superuser), run: " + "; ".join(grants(names, str(role)))
        )


_CREATE = """
SELECT current_user::text, current_database()::text,
       (SELECT has_schema_privilege(n.oid, 'CREATE') AND has_schema_privilege(n.oid, 'USAGE')
          FROM pg_catalog.pg_namespace n WHERE n.nspname = %s),
       has_database_privilege(current_database(), 'CREATE')
"""


async def _check_create(
    conn: AsyncConnection[tuple[object, ...]],
    names: Names,
    *,
    what: str = "create its tables and claim functions",
) -> None:
    """`ConfigError` when the user may not create anarchon's objects, naming the privilege and
    the two ways out (a user with it opens the store once, or a grant)."""
    cur = await conn.execute(_CREATE, (names.schema,))
    row = await cur.fetchone()
    assert row is not None
    role, database, on_schema, on_database = row
    if on_schema is None and not on_database:
        lacking = f"CREATE on database {database} (schema {names.schema} does not exist yet)"
        grant = f"GRANT CREATE ON DATABASE {_quote(str(database))} TO {_quote(str(role))}"
        fix = f"or create the schema for it: CREATE SCHEMA {_quote(names.schema)} AUTHORIZATION"
        fix += f" {_quote(str(role))}"
    elif on_schema is False:
        lacking = f"USAGE and CREATE on schema {names.schema}"
        grant = f"GRANT USAGE, CREATE ON SCHEMA {_quote(names.schema)} TO {_quote(str(role))}"
        fix = "or use a schema it owns (the schema= option)"
    else:
        return
    raise ConfigError(
        f"PostgreSQL user {role!r} cannot {what} in schema {names.schema}: it lacks {lacking}. "
        f"Open the store once as a user that has it (the schema's owner or a superuser; later "
        f"instances then need only USAGE, SELECT, INSERT, UPDATE, DELETE and EXECUTE, see "
        f"the docs), or grant it: {grant}; {fix}"
    )
