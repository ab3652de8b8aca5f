"""The store's connections: from the store URL to libpq (the connection string, and the settings
every connection gets), and the pool that runs each statement, resending it when that is safe.

Nothing here relies on session state, so the store works through PgBouncer in transaction mode:
connections are autocommit (one statement, one transaction), ``prepare_threshold=None`` (no named
server-side prepared statements), no ``SET``, no session advisory locks, no ``LISTEN``.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Awaitable, Callable, Sequence
from typing import Any, TypeVar

import psycopg
from psycopg import AsyncConnection, AsyncCursor
from psycopg.conninfo import conninfo_to_dict, make_conninfo
from psycopg_pool import AsyncConnectionPool, PoolTimeout

from anarchon import ConfigError, StoreUnavailable, StoreURL, redact

from ._errors import RETRYABLE, shown_url
from ._options import PostgresOptions

__all__ = [
    "CONNECT_TIMEOUT_S",
    "POOL_TIMEOUT_S",
    "RETRIES",
    "Conn",
    "Connections",
    "Cursor",
    "connection_kwargs",
    "libpq_conninfo",
]

log = logging.getLogger("anarchon.postgres")

Conn = AsyncConnection[tuple[Any, ...]]
Cursor = AsyncCursor[tuple[Any, ...]]
T = TypeVar("T")

CONNECT_TIMEOUT_S = 10
"""libpq ``connect_timeout`` when the URL sets none: an unreachable server fails in bounded time."""
POOL_TIMEOUT_S = 10.0
"""Longest a call waits for a pooled connection before `StoreUnavailable`."""
RETRIES = 3
"""Resends of a statement rolled back by a serialization failure or deadlock (C2 makes it safe)."""


def libpq_conninfo(url: StoreURL, options: PostgresOptions) -> tuple[str, tuple[str, ...]]:
    """The libpq connection string for `url` without anarchon's options, and the secrets in it
    (to scrub from messages)."""
    params: dict[str, Any] = dict(options.libpq)
    params.setdefault("connect_timeout", str(CONNECT_TIMEOUT_S))
    params.setdefault("application_name", "anarchon")
    if options.statement_timeout_ms:
        # The lock timeout too: the claim functions set it per transaction only when the
        # connection lacks it (through PgBouncer, which does not pass these settings on).
        timeout = options.statement_timeout_ms
        setting = f"-c statement_timeout={timeout} -c lock_timeout={timeout}"
        params["options"] = f"{params['options']} {setting}" if "options" in params else setting
    try:
        conninfo = make_conninfo(url.without_query(), **params)
        parsed = conninfo_to_dict(conninfo)
    except psycopg.ProgrammingError as exc:
        raise ConfigError(
            f"PostgreSQL URL {shown_url(url)} is invalid: {redact(str(exc))}"
        ) from None
    secrets = tuple(
        str(parsed[k]) for k in ("password", "sslpassword") if parsed.get(k) not in (None, "")
    )
    return conninfo, secrets


def connection_kwargs() -> dict[str, Any]:
    """Keyword arguments of every connection (pooled or not)."""
    return {"autocommit": True, "prepare_threshold": None}


class Connections:
    """The store's connection pool and one cursor per pooled connection. `error` turns a psycopg
    error into anarchon's (naming the server, scrubbing secrets); `name` is what a call on a
    closed pool names."""

    def __init__(
        self,
        conninfo: str,
        options: PostgresOptions,
        *,
        pool_name: str,
        name: str,
        where: str,
        error: Callable[[BaseException], Exception],
    ) -> None:
        self.conninfo = conninfo
        self.options = options
        self.pool_name = pool_name
        self.name = name
        self.where = where
        self.error = error
        self.pool: AsyncConnectionPool[Conn] | None = None
        self._cursors: dict[Conn, Cursor] = {}

    async def connect(self) -> Conn:
        """One connection outside the pool (the schema's setup), for the caller to close."""
        try:
            return await AsyncConnection.connect(self.conninfo, **connection_kwargs())
        except (psycopg.Error, OSError) as exc:
            raise self.error(exc) from None

    async def open(self) -> None:
        """Fill the pool (waiting for its first connections when it keeps any)."""
        pool: AsyncConnectionPool[Conn] = AsyncConnectionPool(
            self.conninfo,
            min_size=self.options.pool_min_size,
            max_size=self.options.pool_max_size,
            kwargs=connection_kwargs(),
            open=False,
            name=self.pool_name,
            timeout=POOL_TIMEOUT_S,
            reconnect_timeout=60.0,
        )
        try:
            await pool.open(wait=self.options.pool_min_size > 0, timeout=POOL_TIMEOUT_S)
        except (PoolTimeout, psycopg.Error) as exc:
            await pool.close()
            raise self.error(exc) from None
        self.pool = pool

    async def close(self) -> None:
        pool, self.pool = self.pool, None
        self._cursors.clear()
        if pool is not None:
            await pool.close()

    def _cursor(self, conn: Conn) -> Cursor:
        """The cursor on `conn`, made once per connection (a new psycopg cursor per call costs a
        claim more client time than a parameter does)."""
        cursor = self._cursors.get(conn)
        if cursor is None:
            # Forget the cursors of connections the pool has closed since.
            for old in [c for c in self._cursors if c.closed]:
                del self._cursors[old]
            cursor = self._cursors[conn] = conn.cursor()
        return cursor

    async def run(self, step: Callable[[Cursor], Awaitable[T]]) -> T:
        """Run `step` with the cursor of a pooled connection, within `POOL_TIMEOUT_S` of waiting
        for one.

        A connection that broke while idle in the pool (a server restart) fails at once; the step
        is then resent on the next connection (every call is safe to resend: C2, for finish
        too), until the pool runs out of stale connections. A statement rolled back by a
        serialization failure or deadlock is resent up to `RETRIES` times. (``getconn`` and
        ``putconn`` rather than the pool's ``connection()`` context: every statement is
        autocommit, so there is no transaction to end, and the context manager costs a claim as
        much as a parameter.)"""
        pool = self.pool
        if pool is None:
            raise StoreUnavailable(f"{self.name} is not open: await store.open() first")
        deadline = time.monotonic() + POOL_TIMEOUT_S
        rolled_back = 0
        broken = 0
        while True:
            try:
                conn = await pool.getconn(timeout=max(deadline - time.monotonic(), 0.01))
            except (PoolTimeout, psycopg.Error) as exc:
                raise self.error(exc) from None
            try:
                return await step(self._cursor(conn))
            except RETRYABLE as exc:
                rolled_back += 1
                if rolled_back > RETRIES:
                    raise self.error(exc) from None
            except (psycopg.OperationalError, psycopg.InterfaceError) as exc:
                # Only a connection-level failure (no SQLSTATE) is resent: a timeout is not.
                broken += 1
                if exc.sqlstate is not None or broken > self.options.pool_max_size:
                    raise self.error(exc) from None
                log.info("PostgreSQL at %s: a pooled connection broke; resending", self.where)
            except psycopg.Error as exc:
                raise self.error(exc) from None
            finally:
                await pool.putconn(conn)

    async def fetchone(self, query: Any, params: Sequence[Any] | None) -> tuple[Any, ...]:
        async def step(cur: Cursor) -> tuple[Any, ...]:
            await cur.execute(query, params)
            row = await cur.fetchone()
            assert row is not None
            return row

        return await self.run(step)

    async def execute(self, query: Any, params: Sequence[Any]) -> None:
        async def step(cur: Cursor) -> None:
            await cur.execute(query, params)

        await self.run(step)

    async def fetchall(self, query: Any, params: Sequence[Any]) -> list[tuple[Any, ...]]:
        async def step(cur: Cursor) -> list[tuple[Any, ...]]:
            await cur.execute(query, params)
            return await cur.fetchall()

        return await self.run(step)
