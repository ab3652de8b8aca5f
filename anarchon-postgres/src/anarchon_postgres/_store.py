"""`postgresql://`: the lease store on PostgreSQL, one round trip per claim."""

from __future__ import annotations

import logging
import time
from collections.abc import Awaitable, Callable, Sequence
from typing import Any, ClassVar, TypeVar

import psycopg
from psycopg import AsyncConnection
from psycopg_pool import AsyncConnectionPool, PoolTimeout

from anarchon import (
    Capabilities,
    Claim,
    ClaimRequest,
    ConfigError,
    LeaseStore,
    Overlap,
    RunRecord,
    RunStatus,
    StoreCorrupt,
    StoreOptions,
    StoreUnavailable,
    StoreURL,
)
from anarchon._leases import decide_claim, keep_until

from ._connection import connection_kwargs, libpq_conninfo
from ._errors import RETRYABLE, shown_url, translate
from ._names import Names
from ._options import PostgresOptions
from ._rows import Statements, claim_from_row, run_from_row
from ._schema import ensure_schema

__all__ = ["PostgresStore"]

log = logging.getLogger("anarchon.postgres")

Clock = Callable[[], int]
Conn = AsyncConnection[tuple[Any, ...]]
T = TypeVar("T")

POOL_TIMEOUT_S = 10.0
"""Longest a call waits for a pooled connection before `StoreUnavailable`."""
RETRIES = 3
"""Resends of a statement rolled back by a serialization failure or deadlock (C2 makes it safe)."""


class PostgresStore(LeaseStore):
    """Lease store in PostgreSQL: each claim is one call of the server-side claim function, which
    serializes the claims of one job on a row lock in ``<table>_jobs`` (C1) and keeps L1-L11 as
    `memory://` does. The clock is the server's ``clock_timestamp()``, read after the lock (T1).

    ``clock`` is for tests only (every store sharing the tables must then use the same clock).
    """

    Options: ClassVar[type[StoreOptions]] = PostgresOptions

    def __init__(self, url: StoreURL, options: StoreOptions, *, clock: Clock | None = None) -> None:
        if not isinstance(options, PostgresOptions):
            raise TypeError(f"PostgresStore needs PostgresOptions, got {type(options).__name__}")
        if url.scheme not in ("postgresql", "postgres"):
            raise ConfigError(f"PostgreSQL URL {url} must start with postgresql:// or postgres://")
        self.url = url
        self.options: PostgresOptions = options
        self.clock = clock
        self.names = Names(options.schema, options.table)
        self.where = shown_url(url)
        self._conninfo, secrets = libpq_conninfo(url, options)
        self._secrets = (*secrets, url.password or "")
        self._sql = Statements.build(self.names)
        self._pool: AsyncConnectionPool[Conn] | None = None

    @classmethod
    def create(cls, url: str, *, clock: Clock | None = None, **options: object) -> PostgresStore:
        """Build a store directly (tests, examples); open it with ``await store.open()``."""
        from anarchon._options import structure_options

        parsed = StoreURL.parse(url)
        merged = {**parsed.options(), **options}
        opts = structure_options(PostgresOptions, merged, where=f"{parsed.scheme}://")
        return cls(parsed, opts, clock=clock)

    def __repr__(self) -> str:
        return f"PostgresStore({self.where!r}, table={self.names.shown(self.names.table)!r})"

    @property
    def capabilities(self) -> Capabilities:
        return Capabilities(
            leases=True,
            self_recognition=True,
            fencing=True,
            overlap=True,
            history=True,
            store_clock=True,
            batch=True,
            remembers_ms=None,
        )

    # -- connections -------------------------------------------------------------------------
    def _error(self, exc: BaseException) -> Exception:
        tables = ", ".join(self.names.shown(t) for t in self.names.tables)
        return translate(exc, self.where, self._secrets, tables=tables)

    async def open(self) -> None:
        """Connect, create or check the tables and the claim function, and fill the pool.

        `StoreUnavailable` when the server cannot be reached or refuses the login (the message
        names the URL without its password), `StoreCorrupt` when the tables are not ours,
        `ConfigError` when the user lacks a permission."""
        if self._pool is not None:
            return
        try:
            conn = await AsyncConnection.connect(self._conninfo, **connection_kwargs())
        except (psycopg.Error, OSError) as exc:
            raise self._error(exc) from None
        try:
            await ensure_schema(conn, self.names)
            self._sql = self._sql.rendered(conn)
        except psycopg.Error as exc:
            raise self._error(exc) from None
        finally:
            await conn.close()
        pool: AsyncConnectionPool[Conn] = AsyncConnectionPool(
            self._conninfo,
            min_size=self.options.pool_min_size,
            max_size=self.options.pool_max_size,
            kwargs=connection_kwargs(),
            open=False,
            name=f"anarchon-{self.names.table}",
            timeout=POOL_TIMEOUT_S,
            reconnect_timeout=60.0,
        )
        try:
            await pool.open(wait=self.options.pool_min_size > 0, timeout=POOL_TIMEOUT_S)
        except (PoolTimeout, psycopg.Error) as exc:
            await pool.close()
            raise self._error(exc) from None
        self._pool = pool

    async def close(self) -> None:
        pool, self._pool = self._pool, None
        if pool is not None:
            await pool.close()

    async def _run(self, step: Callable[[Conn], Awaitable[T]], *, resend: bool = True) -> T:
        """Run `step` on a pooled connection, within `POOL_TIMEOUT_S` of waiting for one.

        A connection that broke while idle in the pool (a server restart) fails at once; the step
        is then resent on the next connection, when resending is safe (C2), until the pool runs
        out of stale connections. A statement rolled back by a serialization failure or deadlock
        is resent up to `RETRIES` times."""
        pool = self._pool
        if pool is None:
            raise StoreUnavailable(f"{self!r} is not open: await store.open() first")
        deadline = time.monotonic() + POOL_TIMEOUT_S
        rolled_back = 0
        broken = 0
        while True:
            try:
                async with pool.connection(timeout=max(deadline - time.monotonic(), 0.01)) as conn:
                    return await step(conn)
            except RETRYABLE as exc:
                rolled_back += 1
                if rolled_back > RETRIES:
                    raise self._error(exc) from None
            except (psycopg.OperationalError, psycopg.InterfaceError) as exc:
                # Only a connection-level failure (no SQLSTATE) is resent: a timeout is not.
                broken += 1
                if not resend or exc.sqlstate is not None or broken > self.options.pool_max_size:
                    raise self._error(exc) from None
                log.info("PostgreSQL at %s: a pooled connection broke; resending", self.where)
            except (PoolTimeout, psycopg.Error) as exc:
                raise self._error(exc) from None

    def _now_param(self) -> int | None:
        return None if self.clock is None else self.clock()

    # -- claims (L1-L6, L10, L11) ----------------------------------------------------------
    def _args(self, request: ClaimRequest) -> tuple[Any, ...]:
        return (
            self.options.prefix,
            request.job,
            request.slot,
            request.token,
            request.instance,
            request.lease_ms,
            request.max_late_ms,
            request.overlap is Overlap.SKIP,
            request.attempts,
            keep_until(request, self.options.retention_margin_ms),
            self.options.history_limit,
            self.options.statement_timeout_ms,
            self._now_param(),
        )

    async def claim(self, request: ClaimRequest) -> Claim:
        async def step(conn: Conn) -> Claim:
            cur = await conn.execute(self._sql.claim, self._args(request))
            row = await cur.fetchone()
            assert row is not None
            return claim_from_row(row, request, self.where)

        return await self._run(step)

    async def claim_many(self, requests: Sequence[ClaimRequest]) -> list[Claim]:
        """All requests in one statement (one transaction). Distinct jobs of one slot (what the
        scheduler sends) go to the batch function, which decides them set-based; any other batch
        to the claim function once per request, in order within each job. Either way the jobs'
        row locks are taken in job order, so concurrent batches never deadlock."""
        batch = list(requests)
        if not batch:
            return []
        slot = batch[0].slot
        if all(r.slot == slot for r in batch) and len({r.job for r in batch}) == len(batch):
            return await self._claim_slot(batch, slot)
        order = sorted(range(len(batch)), key=lambda i: (batch[i].job, i))
        ordered = [batch[i] for i in order]
        columns = [list(c) for c in zip(*(self._args(r)[1:10] for r in ordered), strict=True)]
        params = (
            *columns,
            self.options.prefix,
            self.options.history_limit,
            self.options.statement_timeout_ms,
            self._now_param(),
        )

        async def step(conn: Conn) -> list[Claim]:
            cur = await conn.execute(self._sql.claim_many, params)
            rows = await cur.fetchall()
            return [claim_from_row(row[1:], ordered[row[0] - 1], self.where) for row in rows]

        claims = await self._run(step)
        result: list[Claim | None] = [None] * len(batch)
        for position, claim in zip(order, claims, strict=True):
            result[position] = claim
        return [c for c in result if c is not None]

    async def _claim_slot(self, batch: list[ClaimRequest], slot: int) -> list[Claim]:
        """Distinct jobs of one slot: one call of the batch function (see `_function`)."""
        margin = self.options.retention_margin_ms
        params = (
            self.options.prefix,
            [r.job for r in batch],
            slot,
            [r.token for r in batch],
            [r.instance for r in batch],
            [r.lease_ms for r in batch],
            [r.max_late_ms for r in batch],
            [r.overlap is Overlap.SKIP for r in batch],
            [r.attempts for r in batch],
            [keep_until(r, margin) for r in batch],
            self.options.history_limit,
            self.options.statement_timeout_ms,
            self._now_param(),
        )

        async def step(conn: Conn) -> list[tuple[Any, ...]]:
            cur = await conn.execute(self._sql.claim_slot, params)
            return await cur.fetchall()

        rows = await self._run(step)
        result: list[Claim | None] = [None] * len(batch)
        for row in rows:
            index = row[0] - 1
            result[index] = claim_from_row(row[1:], batch[index], self.where)
        claims = [c for c in result if c is not None]
        if len(claims) != len(batch):
            raise StoreCorrupt(
                f"the batch claim function in {self.where} answered {len(rows)} rows for "
                f"{len(batch)} requests; reopen the store"
            )
        return claims

    async def check(self, request: ClaimRequest) -> Claim:
        """L10: one plain ``SELECT`` outside any transaction; the claim function only when the
        run is missing or its lease ran out."""
        key = (self.options.prefix, request.job, request.slot)

        async def read(conn: Conn) -> Claim | None:
            cur = await conn.execute(self._sql.read, (self._now_param(), *key))
            row = await cur.fetchone()
            assert row is not None
            if row[1] is None:
                return None
            now = row[0]
            run = run_from_row(row[1:], request.job, self.names.shown(self.names.table))
            if run.status.finished or (run.lease_until is not None and run.lease_until >= now):
                claim, _ = decide_claim(run, request, now, floor=None, other_live=lambda: False)
                return claim
            return None

        answered = await self._run(read)
        return answered if answered is not None else await self.claim(request)

    # -- the lease holder's writes (L7-L9): one UPDATE each, token and status compared ------
    async def _update(
        self,
        statement: Any,
        values: tuple[Any, ...],
        job: str,
        slot: int,
        token: str,
        *,
        resend: bool = True,
    ) -> bool:
        params = (*values, self.options.prefix, job, slot, token)

        async def step(conn: Conn) -> bool:
            cur = await conn.execute(statement, params)
            return cur.rowcount == 1

        return await self._run(step, resend=resend)

    async def renew(self, job: str, slot: int, token: str, lease_ms: int) -> bool:
        return await self._update(self._sql.renew, (self._now_param(), lease_ms), job, slot, token)

    async def finish(
        self, job: str, slot: int, token: str, status: RunStatus, error: str | None = None
    ) -> bool:
        if not status.finished:
            raise ValueError(f"finish needs a final status, got {status}")
        # Not resent here: had the first one committed before its reply was lost, a resend
        # would answer False (fenced) for a result that was recorded. The runtime retries.
        return await self._update(
            self._sql.finish,
            (status.value, self._now_param(), error),
            job,
            slot,
            token,
            resend=False,
        )

    async def release(self, job: str, slot: int, token: str) -> bool:
        return await self._update(self._sql.release, (self._now_param(),), job, slot, token)

    # -- reads ---------------------------------------------------------------------------------
    async def history(self, job: str, limit: int = 100) -> list[RunRecord]:
        if isinstance(limit, bool) or not isinstance(limit, int) or limit < 0:
            raise ConfigError(f"history limit must be an int >= 0, got {limit!r}")
        where = self.names.shown(self.names.table)

        async def step(conn: Conn) -> list[RunRecord]:
            cur = await conn.execute(self._sql.history, (self.options.prefix, job, limit))
            return [run_from_row(row, job, where) for row in await cur.fetchall()]

        return await self._run(step)

    async def jobs(self) -> list[str]:
        """`SupportsJobList`: the jobs of this prefix with a remembered run or a floor."""

        async def step(conn: Conn) -> list[str]:
            cur = await conn.execute(self._sql.jobs, (self.options.prefix, self.options.prefix))
            return [str(row[0]) for row in await cur.fetchall()]

        return await self._run(step)

    async def now_ms(self) -> int:
        """The server's ``clock_timestamp()`` in epoch ms (T1)."""

        async def step(conn: Conn) -> int:
            cur = await conn.execute(self._sql.now, (self._now_param(),))
            row = await cur.fetchone()
            assert row is not None
            return int(row[0])

        return await self._run(step)
