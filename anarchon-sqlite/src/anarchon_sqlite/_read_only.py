"""Reading a SQLite store without writing a byte (`SQLiteStore.open_read_only`, rule R1).

The file is opened through a ``file:`` URI with ``mode=ro``: SQLite then opens it read-only and
never creates it; no pragma that writes (``journal_mode``, ``synchronous``) and no ``CREATE``
runs, and ``query_only`` refuses any write that slipped through.

A reader of a database in write-ahead logging mode needs its ``-wal`` and ``-shm`` files, and
SQLite creates them next to the database when they are missing (and fails when the directory is
read-only). They are missing exactly when no connection has the database open: the last one to
close checkpoints the log into the file and deletes both. The database file then holds every
committed run, so it is read with ``immutable=1`` instead, which creates no file and takes no
lock. A scheduler that starts meanwhile writes to a new log and does not touch the file before
its first checkpoint (a thousand pages of claims later, or when it stops), far longer than a
read takes; each read opens its own connection, so the next one sees the log and uses it. With a
log present, the reader uses it (its read marks live in the ``-shm`` shared memory, never in the
database), and a read-only ``-shm`` is read through SQLite's private copy.
"""

from __future__ import annotations

import os
import sqlite3
from collections.abc import Callable
from typing import Any, TypeVar
from urllib.parse import quote

from anarchon import ConfigError, StoreNotSetUp

from ._errors import translate
from ._schema import JOBS, RUNS, SCHEMA, existing_tables, verify_schema

__all__ = ["check_readable", "read"]

T = TypeVar("T")

_TABLES = f"{SCHEMA}, {RUNS}, {JOBS}"
_NO_LOG = ("SQLITE_CANTOPEN", "SQLITE_READONLY")
"""What ``mode=ro`` answers when it would have to create the log files and cannot."""


def _missing(path: str) -> StoreNotSetUp:
    return StoreNotSetUp(
        f"no SQLite database file {path}: no scheduler has used this URL (nothing was created). "
        "Check the path: sqlite:///relative.db is relative to the working directory, "
        "sqlite:////absolute/path.db is absolute"
    )


def _connect(path: str, busy_timeout_ms: int) -> sqlite3.Connection:
    if not os.path.exists(path):
        raise _missing(path)
    if os.path.isdir(path):
        raise ConfigError(
            f"SQLite database path {path} is a directory; name the database file inside it, "
            f"for example sqlite:///{os.path.join(path, 'anarchon.db')}"
        )
    # A log present means a connection has (or had, before a crash) the file open: read
    # through it. Absent, the file holds everything: read it as it is (module doc).
    immutable = not os.path.exists(path + "-wal")
    while True:
        uri = f"file:{quote(path)}?mode=ro" + ("&immutable=1" if immutable else "")
        try:
            conn = sqlite3.connect(
                uri, uri=True, isolation_level=None, timeout=busy_timeout_ms / 1000
            )
            conn.execute("PRAGMA query_only = ON")
            conn.execute("SELECT count(*) FROM sqlite_master").fetchone()  # opens the file
        except sqlite3.Error as exc:
            name = str(getattr(exc, "sqlite_errorname", ""))
            if not immutable and name.startswith(_NO_LOG) and not os.path.exists(path + "-wal"):
                immutable = True  # the last connection closed since we looked: read the file
                continue
            raise translate(exc, path, busy_timeout_ms=busy_timeout_ms) from None
        return conn


def check_readable(path: str, busy_timeout_ms: int) -> None:
    """The file exists and holds anarchon's tables, unchanged (`StoreCorrupt` otherwise, as
    `open` says); `StoreNotSetUp` for a missing file or one without the tables."""
    conn = _connect(path, busy_timeout_ms)
    try:
        if not existing_tables(conn):
            raise StoreNotSetUp(
                f"SQLite database {path} holds no anarchon tables ({_TABLES}): no scheduler "
                "has opened it, or the URL names another application's database. Point the URL "
                "at the file your schedulers use"
            )
        verify_schema(conn, path, control=False)  # a file from before pauses is readable
    except sqlite3.Error as exc:
        raise translate(exc, path, busy_timeout_ms=busy_timeout_ms) from None
    finally:
        conn.close()


def read(path: str, busy_timeout_ms: int, fn: Callable[..., T], *args: Any) -> T:
    """``fn(connection, *args)`` on a connection of its own that can only read (module doc)."""
    conn = _connect(path, busy_timeout_ms)
    try:
        return fn(conn, *args)
    except sqlite3.Error as exc:
        raise translate(exc, path, busy_timeout_ms=busy_timeout_ms) from None
    finally:
        conn.close()
