"""The fleet's member list on a SQLite file (rule M1, `anarchon.abc.SupportsMembership`).

One row per instance in ``anarchon_members``, keyed (prefix, instance). An announce is one
``BEGIN IMMEDIATE`` transaction on the store's worker: it reads the member's row, keeps its
``started_ms`` while it is live, replaces the row, and deletes the prefix's members whose ttl ran
out, all at one reading of this host's clock (the clock of every instance sharing the file, T1).
`list_members` is one SELECT, on the store's connection or, opened read-only, on a connection of
its own (`_read_only`); a file from before members has no table there, and no member.
"""

from __future__ import annotations

import sqlite3
from collections.abc import Callable

from anarchon import Member
from anarchon.backend import joined_at, read_member, stats_text

from ._schema import MEMBERS

__all__ = ["MEMBERS", "announce", "leave", "list_members", "write"]

Clock = Callable[[], int]

_SELECT_ONE = f"SELECT started_ms, until_ms FROM {MEMBERS} WHERE prefix = ? AND instance = ?"
_REPLACE = (
    f"INSERT OR REPLACE INTO {MEMBERS} (prefix, instance, started_ms, seen_ms, until_ms, stats) "
    "VALUES (?, ?, ?, ?, ?, ?)"
)
_DELETE_EXPIRED = f"DELETE FROM {MEMBERS} WHERE prefix = ? AND until_ms < ?"
_DELETE_ONE = f"DELETE FROM {MEMBERS} WHERE prefix = ? AND instance = ? RETURNING until_ms"
_SELECT_LIVE = (
    f"SELECT instance, started_ms, seen_ms, until_ms, stats FROM {MEMBERS} "
    "WHERE prefix = ? AND until_ms >= ? ORDER BY instance"
)


def _int(value: object) -> int | None:
    return value if isinstance(value, int) and not isinstance(value, bool) else None


def write(
    conn: sqlite3.Connection,
    clock: Clock,
    step: Callable[..., Member | bool],
    prefix: str,
    *args: object,
) -> Member | bool:
    """``step(conn, prefix, now, *args)`` in a ``BEGIN IMMEDIATE`` transaction of its own, with
    `clock` read under the write lock, committed before the answer."""
    conn.execute("BEGIN IMMEDIATE")
    try:
        result = step(conn, prefix, clock(), *args)
        conn.execute("COMMIT")
    except BaseException:
        if conn.in_transaction:
            conn.execute("ROLLBACK")
        raise
    return result


def announce(
    conn: sqlite3.Connection,
    prefix: str,
    now: int,
    instance: str,
    ttl_ms: int,
    stats: dict[str, int],
) -> Member:
    """Write or refresh `instance`, live until ``now + ttl_ms`` (inside the caller's
    transaction); a row anarchon never wrote is replaced, as a member joining anew."""
    row = conn.execute(_SELECT_ONE, (prefix, instance)).fetchone()
    old_started, old_until = (_int(row[0]), _int(row[1])) if row is not None else (None, None)
    started = joined_at(old_started, old_until, now)
    member = Member(
        instance=instance, seen_ms=now, until_ms=now + ttl_ms, started_ms=started, stats=stats
    )
    conn.execute(_DELETE_EXPIRED, (prefix, now))
    conn.execute(
        _REPLACE, (prefix, instance, started, now, member.until_ms, stats_text(member.stats))
    )
    return member


def leave(conn: sqlite3.Connection, prefix: str, now: int, instance: str) -> bool:
    """Delete `instance`; whether it was a live member."""
    rows = conn.execute(_DELETE_ONE, (prefix, instance)).fetchall()
    return any((_int(row[0]) or 0) >= now for row in rows)


def list_members(conn: sqlite3.Connection, prefix: str, now: int, path: str) -> list[Member]:
    """The live members of `prefix` at `now`, sorted by instance (code points: SQLite compares
    UTF-8 text byte by byte). A row anarchon never writes is `StoreCorrupt` naming it."""
    rows = conn.execute(_SELECT_LIVE, (prefix, now)).fetchall()
    return [
        read_member(
            row[0],
            row[1],
            row[2],
            row[3],
            row[4],
            where=f"table {MEMBERS} in SQLite database {path} (prefix {prefix!r}, instance "
            f"{row[0]!r})",
        )
        for row in rows
    ]
