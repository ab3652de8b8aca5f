"""The tables anarchon keeps in a SQLite file, created once and checked on every open.

Every deployment (prefix) shares the same tables; the prefix is the first column of every key,
so prefixes never see each other's rows. Creation runs inside ``BEGIN IMMEDIATE``, so many
processes opening one new file at once create it exactly once. A file whose tables exist but do
not look like ours is never touched: opening it raises `StoreCorrupt`.

The control tables (pauses and triggers, rules P1 and X1) came later than the three others, and
the member list (``anarchon_members``, rule M1) later still: it is one of them here. A
file written before them gets them on its next open (``CREATE TABLE IF NOT EXISTS``, in a
transaction of its own); they do not change the schema version, since a release that does not
know them reads and writes its own tables as before (it ignores pauses: see the docs on
upgrading). A file opened read-only may lack them: it has no pause and no trigger.
"""

from __future__ import annotations

import sqlite3
from importlib.resources import files

from anarchon import StoreCorrupt

__all__ = [
    "CONTROL",
    "JOBS",
    "MEMBERS",
    "PAUSES",
    "RUNS",
    "SCHEMA",
    "SCHEMA_VERSION",
    "TRIGGERS",
    "check_schema",
    "ensure_schema",
    "existing_tables",
    "verify_schema",
]

SCHEMA = "anarchon_schema"
RUNS = "anarchon_runs"
JOBS = "anarchon_jobs"
PAUSES = "anarchon_pauses"
TRIGGERS = "anarchon_triggers"
MEMBERS = "anarchon_members"
SCHEMA_VERSION = 1
COMPONENT = "sqlite"

# name -> (columns in order, primary key columns)
_TABLES: dict[str, tuple[tuple[str, ...], tuple[str, ...]]] = {
    SCHEMA: (("component", "version"), ("component",)),
    RUNS: (
        (
            "prefix",
            "job",
            "slot",
            "status",
            "attempt",
            "token",
            "holder",
            "claimed_at",
            "lease_until",
            "finished_at",
            "error",
            "keep_until",
        ),
        ("prefix", "job", "slot"),
    ),
    JOBS: (("prefix", "job", "floor"), ("prefix", "job")),
}
_CONTROL: dict[str, tuple[tuple[str, ...], tuple[str, ...]]] = {
    PAUSES: (
        ("prefix", "job", "since_ms", "until_ms", "reason", "paused_by"),
        ("prefix", "job"),
    ),
    TRIGGERS: (
        ("prefix", "job", "slot", "requested_at", "reason", "requested_by"),
        ("prefix", "job", "slot"),
    ),
    # The fleet's member list (M1), added beside the control tables, as they were.
    MEMBERS: (
        ("prefix", "instance", "started_ms", "seen_ms", "until_ms", "stats"),
        ("prefix", "instance"),
    ),
}
CONTROL = tuple(_CONTROL)
"""The control tables, which a file from an older release may lack (module doc)."""
_ALL = {**_TABLES, **_CONTROL}


def _create(name: str = "tables.sql") -> list[str]:
    """The statements of ``_sql/<name>`` (after its header of comment lines), with the names."""
    text = files("anarchon_sqlite").joinpath("_sql").joinpath(name).read_text("utf-8")
    lines = text.split("\n")
    while lines and lines[0].startswith("--"):
        lines.pop(0)
    names = {
        "schema": SCHEMA,
        "runs": RUNS,
        "jobs": JOBS,
        "pauses": PAUSES,
        "triggers": TRIGGERS,
        "members": MEMBERS,
        "component": COMPONENT,
        "version": SCHEMA_VERSION,
    }
    statements = (s.strip() for s in "\n".join(lines).split(";\n"))
    return [s.format(**names) for s in statements if s]


def existing_tables(conn: sqlite3.Connection) -> dict[str, str]:
    """Which of anarchon's tables the file has, by name, with their kind (table, view ...)."""
    names = tuple(_ALL)
    marks = ", ".join("?" * len(names))
    rows = conn.execute(
        f"SELECT name, type FROM sqlite_master WHERE name IN ({marks})", names
    ).fetchall()
    return {str(name): str(kind) for name, kind in rows}


def check_schema(conn: sqlite3.Connection, path: str) -> None:
    """Before anything is written to the file (even the switch to WAL): if any of our tables
    exists, check them all, so a foreign or tampered file is refused untouched."""
    if existing_tables(conn):
        verify_schema(conn, path, control=False)


def ensure_schema(conn: sqlite3.Connection, path: str) -> None:
    """Create the tables in a new file, or check that an existing file holds ours, unchanged.

    `conn` is in autocommit mode (``isolation_level=None``). Raises `StoreCorrupt` naming the table
    and what is wrong; nothing is written to a file that already has any of the tables.
    """
    if len(existing_tables(conn)) == len(_ALL):  # the usual case: a plain read, no write lock
        verify_schema(conn, path)
        return
    conn.execute("BEGIN IMMEDIATE")
    try:
        found = existing_tables(conn)
        if not found:
            for statement in _create():
                conn.execute(statement)
        elif any(table in found for table in _TABLES):
            # A file of an older release: check its tables before adding the control tables.
            verify_schema(conn, path, control=False)
        for statement in [*_create("control.sql"), *_create("members.sql")]:
            conn.execute(statement)
        conn.execute("COMMIT")
    except BaseException:
        conn.execute("ROLLBACK")
        raise
    verify_schema(conn, path)


def verify_schema(conn: sqlite3.Connection, path: str, *, control: bool = True) -> None:
    """The tables that exist are ours, unchanged, all there (the control tables too, unless
    `control` is False: a file of an older release), at our version: else `StoreCorrupt`.
    Reads only."""
    found = existing_tables(conn)
    fix = "it was not written by this anarchon-sqlite; point the URL at a new file"
    for table, kind in found.items():  # tables that exist first: a foreign one is named as such
        columns, key = _ALL[table]
        where = f"table {table} in SQLite database {path}"
        if kind != "table":
            raise StoreCorrupt(f"{where} is a {kind}, not a table; {fix}")
        info = conn.execute(f"PRAGMA table_info({table})").fetchall()
        have = tuple(str(row[1]) for row in info)
        missing = [c for c in columns if c not in have]
        extra = [c for c in have if c not in columns]
        if missing or extra:
            problems = []
            if missing:
                problems.append("missing column(s) " + ", ".join(missing))
            if extra:
                problems.append("unknown column(s) " + ", ".join(extra))
            raise StoreCorrupt(f"{where} has {' and '.join(problems)}; {fix}")
        have_key = tuple(str(row[1]) for row in sorted(info, key=lambda r: int(r[5])) if row[5])
        if have_key != key:
            raise StoreCorrupt(
                f"{where} has primary key ({', '.join(have_key)}), expected "
                f"({', '.join(key)}); {fix}"
            )
    for table in (*_TABLES, *(CONTROL if control else ())):
        if table not in found:
            raise StoreCorrupt(
                f"table {table} in SQLite database {path} is missing while other anarchon "
                f"tables exist; {fix}"
            )
    rows = conn.execute(f"SELECT component, version FROM {SCHEMA}").fetchall()
    versions = dict(rows)
    version = versions.get(COMPONENT)
    if version != SCHEMA_VERSION:
        shown = "no row" if version is None else f"version {version!r}"
        hint = (
            "upgrade anarchon-sqlite to a release that knows it"
            if isinstance(version, int) and version > SCHEMA_VERSION
            else "point the URL at a new file"
        )
        raise StoreCorrupt(
            f"table {SCHEMA} in SQLite database {path} has {shown} for component "
            f"{COMPONENT!r}; this anarchon-sqlite reads version {SCHEMA_VERSION}: {hint}"
        )
