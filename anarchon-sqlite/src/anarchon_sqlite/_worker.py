"""One connection, one thread: every sqlite3 call of a store runs on its own worker thread.

sqlite3 blocks (on disk I/O and while the file is locked), so it never runs on the event loop.
One thread per connection also keeps the connection's single-thread rule without any locking of
ours.

Waiting for the write lock is ours too. SQLite's own busy handler sleeps 1, 2, 5 ... up to 100 ms
between attempts, so under contention a waiter sleeps long after the lock was freed; claims hold
it for tens of microseconds. So each connection runs with ``busy_timeout = 0`` and a statement
that finds the file locked is retried here after a short pause (0.1 ms, doubling to 2 ms), until
`busy_timeout_ms` has passed.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import sqlite3
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from typing import Any, TypeVar

from anarchon import ConfigError, StoreUnavailable

from ._errors import is_busy, translate
from ._schema import check_schema, ensure_schema

__all__ = ["Worker", "open_connection", "retried"]

T = TypeVar("T")


def _check_path(path: str) -> None:
    parent = os.path.dirname(path) or "."
    if not os.path.isdir(parent):
        what = "is not a directory" if os.path.exists(parent) else "does not exist"
        raise ConfigError(
            f"cannot create SQLite database {path}: its directory {parent} {what}; create the "
            "directory first or choose a path in an existing one (sqlite:///relative.db, "
            "sqlite:////absolute/path.db)"
        )
    if os.path.isdir(path):
        raise ConfigError(
            f"SQLite database path {path} is a directory; name a file inside it, for example "
            f"sqlite:///{os.path.join(path, 'anarchon.db')}"
        )


def open_connection(path: str, busy_timeout_ms: int) -> sqlite3.Connection:
    """Open `path` in autocommit mode, switch it to WAL, and create or check the schema."""
    _check_path(path)
    try:
        conn = sqlite3.connect(
            path,
            timeout=busy_timeout_ms / 1000,
            isolation_level=None,  # we issue BEGIN IMMEDIATE ourselves (DESIGN 4, SQLite)
        )
    except sqlite3.Error as exc:
        raise translate(exc, path, busy_timeout_ms=busy_timeout_ms) from None
    try:
        conn.execute(f"PRAGMA busy_timeout = {int(busy_timeout_ms)}")
        check_schema(conn, path)
        # Switching a new file to WAL needs the file to itself, and SQLite answers "locked" at
        # once, without its busy handler, when another connection switches it at that moment
        # (processes opening one new file together): retried like any locked statement.
        mode = retried(_wal, conn, busy_timeout_ms)
        if str(mode).lower() != "wal":
            raise ConfigError(
                f"SQLite database {path} cannot use write-ahead logging (journal mode stays "
                f"{mode!r}); put the file on a local file system"
            )
        conn.execute("PRAGMA synchronous = NORMAL")
        ensure_schema(conn, path)
        conn.execute("PRAGMA busy_timeout = 0")  # waits are retried by Worker (module doc)
    except sqlite3.Error as exc:
        conn.close()
        raise translate(exc, path, busy_timeout_ms=busy_timeout_ms) from None
    except BaseException:
        conn.close()
        raise
    return conn


def _wal(conn: sqlite3.Connection) -> object:
    return conn.execute("PRAGMA journal_mode = WAL").fetchone()[0]


def retried(fn: Callable[..., T], conn: sqlite3.Connection, busy_timeout_ms: int, *args: Any) -> T:
    """``fn(conn, *args)``, retried from the start while the file is locked (module doc), for up
    to `busy_timeout_ms`; then the last `sqlite3.Error` is raised. Every step must be safe to
    retry: a locked file fails it before it wrote anything."""
    deadline: float | None = None
    pause = 0.0001
    while True:
        try:
            return fn(conn, *args)
        except sqlite3.Error as exc:
            if conn.in_transaction:  # never leave the write lock held after a failure
                with contextlib.suppress(sqlite3.Error):
                    conn.execute("ROLLBACK")
            if not is_busy(exc):
                raise
            now = time.monotonic()
            if deadline is None:
                deadline = now + busy_timeout_ms / 1000
            if now >= deadline:
                raise
            time.sleep(min(pause, deadline - now))
            pause = min(pause * 2, 0.002)


class Worker:
    """The store's connection and the single thread that uses it."""

    def __init__(self, path: str, busy_timeout_ms: int) -> None:
        self.path = path
        self.busy_timeout_ms = busy_timeout_ms
        self._executor: ThreadPoolExecutor | None = None
        self._conn: sqlite3.Connection | None = None
        self.read_only = False
        """The store was opened read-only (R1): this connection is never opened."""

    async def start(self) -> None:
        if self._executor is not None:
            return
        executor = ThreadPoolExecutor(max_workers=1, thread_name_prefix="anarchon-sqlite")
        try:
            future = executor.submit(open_connection, self.path, self.busy_timeout_ms)
            self._conn = await asyncio.wrap_future(future)
        except BaseException:
            executor.shutdown(wait=False)
            raise
        self._executor = executor

    async def stop(self) -> None:
        executor, conn = self._executor, self._conn
        self._executor = self._conn = None
        if executor is None:
            return
        if conn is not None:
            await asyncio.wrap_future(executor.submit(conn.close))
        executor.shutdown(wait=False)

    async def run(self, fn: Callable[..., T], *args: Any) -> T:
        """Run ``fn(connection, *args)`` on the worker thread; sqlite3 errors become anarchon
        errors."""
        executor, conn = self._executor, self._conn
        if self.read_only:
            raise ConfigError(
                f"SQLite store {self.path} was opened read-only (open_read_only): it reads "
                "history and jobs, and makes no claim and no lease call; open it with "
                "'await anarchon.connect(url)' to claim"
            )
        if executor is None or conn is None:
            raise StoreUnavailable(
                f"SQLite store {self.path} is not open: use 'await anarchon.connect(url)' or "
                "'await store.open()' first"
            )
        return await asyncio.wrap_future(executor.submit(self._call, fn, conn, *args))

    def _call(self, fn: Callable[..., T], conn: sqlite3.Connection, *args: Any) -> T:
        """``fn(conn, *args)``, `retried` while the file is locked; then an anarchon error."""
        try:
            return retried(fn, conn, self.busy_timeout_ms, *args)
        except sqlite3.Error as exc:
            raise translate(exc, self.path, busy_timeout_ms=self.busy_timeout_ms) from None
