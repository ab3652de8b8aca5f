"""Opening a store read-only (rule R1): catalog reads only, and the rights a monitoring user needs.

`check_readable` looks for the schema, then anarchon's tables in it, then checks the current
user's rights by OID, the tables' columns and the schema version: every step a ``SELECT``, with no
lock, ``SET``, function of ours or transaction of its own. The claim functions are not looked at:
reading needs none of them. Reads after it (`history`, `jobs`, `now_ms`, `pauses`, `triggers`)
are plain ``SELECT``s too, so ``USAGE`` on the schema and ``SELECT`` on the tables are all a user
needs. A schema made before the control tables (pauses, triggers) is read without them: it has
no pause and no trigger. A reader without ``SELECT`` on the members table (granted before it
existed) still opens the store: only `members` is refused, with the grant that fixes it.
"""

from __future__ import annotations

from psycopg import AsyncConnection

from anarchon import ConfigError, StoreNotSetUp

from ._names import Names
from ._schema import _catalog, _quote, _verify_tables, _version

__all__ = ["check_readable", "read_grants"]


def read_grants(names: Names, role: str) -> list[str]:
    """The ``GRANT`` statements that let `role` read a store whose objects exist, and nothing
    more: ``USAGE`` on the schema and ``SELECT`` on the runs, jobs, version, pauses and triggers
    tables."""
    schema = _quote(names.schema)
    tables = ", ".join(f"{schema}.{_quote(t)}" for t in names.all_tables)
    return [
        f"GRANT USAGE ON SCHEMA {schema} TO {_quote(role)}",
        f"GRANT SELECT ON {tables} TO {_quote(role)}",
    ]


_PLACE = """
SELECT current_user::text, n.oid IS NOT NULL, coalesce(has_schema_privilege(n.oid, 'USAGE'), false),
       (SELECT coalesce(json_object_agg(c.relname, has_table_privilege(c.oid, 'SELECT')), '{}'::json)
          FROM pg_catalog.pg_class c WHERE c.relnamespace = n.oid AND c.relname = ANY(%s))
FROM (SELECT 1) AS one
LEFT JOIN pg_catalog.pg_namespace n ON n.nspname = %s
"""


def _not_set_up(names: Names, where: str, what: str) -> StoreNotSetUp:
    return StoreNotSetUp(
        f"no anarchon store at {where}: {what}. A scheduler creates the schema and tables on "
        f"its first open; if it ran with other options, give the same ones: ?schema= selects "
        f"the schema (here {names.schema}, default public) and ?table= the tables (here "
        f"{names.table}, default anarchon_runs)"
    )


async def check_readable(
    conn: AsyncConnection[tuple[object, ...]], names: Names, where: str
) -> bool:
    """Raise unless `conn`'s user can read anarchon's tables under `names`: `StoreNotSetUp` when
    the schema or the tables do not exist, `ConfigError` (with the ``GRANT`` statements) when
    the user lacks a right, `StoreCorrupt` when the tables are not anarchon's or are newer.
    Returns whether the control tables exist (a schema made before them has none)."""
    cur = await conn.execute(_PLACE, (list(names.all_tables), names.schema))
    row = await cur.fetchone()
    assert row is not None  # one row whatever the schema
    role, schema_exists, usage, readable = row
    assert isinstance(readable, dict)
    if not schema_exists:
        raise _not_set_up(names, where, f"schema {names.schema} does not exist")
    if not any(t in readable for t in names.tables):
        raise _not_set_up(names, where, f"schema {names.schema} has no table {names.table}")
    missing = [] if usage else [f"USAGE on schema {names.schema}"]
    # The member list (M1) came after these rights were first granted: a reader granted the
    # tables before it still reads runs, pauses and triggers; only `members()` needs the grant.
    missing.extend(
        f"SELECT on table {names.shown(t)}"
        for t in names.all_tables
        if readable.get(t) is False and t != names.members_table
    )
    if missing:
        raise ConfigError(
            f"PostgreSQL user {role!r} cannot read the anarchon tables at {where}: it lacks "
            f"{'; '.join(missing)}. As the tables' owner (or a superuser), run: "
            + "; ".join(read_grants(names, str(role)))
        )
    # Tables of other names, or only some of ours, are not a store to read: as `open` says.
    _verify_tables(await _catalog(conn, names), names)
    await _version(conn, names)
    return all(t in readable for t in names.control_tables)
