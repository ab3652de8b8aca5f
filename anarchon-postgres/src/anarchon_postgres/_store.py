"""`postgresql://`: the lease store on PostgreSQL, one round trip per claim."""

from __future__ import annotations

import functools
from collections.abc import Callable, Sequence
from typing import Any, ClassVar

import attrs
import psycopg

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
    StoreURL,
)
from anarchon.backend import LEASE_STORE, HistoryReader, keep_until, structure_options

from ._batch import missing_jobs, pack_slot_batch, read_slot_answers
from ._connection import Connections, Cursor, libpq_conninfo
from ._control import ControlStatements, PauseAndTrigger
from ._durability import check_replicated
from ._errors import shown_url, translate
from ._members import Membership, MemberStatements
from ._names import Names
from ._options import PostgresOptions
from ._plpgsql import lock_timeout_setting
from ._read_only import check_readable
from ._rows import INLINE_CLOSE, INLINE_QUOTE, Statements, claim_from_answer, run_from_row
from ._schema import ensure_schema

__all__ = ["PostgresStore"]

Clock = Callable[[], int]
_INLINE_CLOSE = INLINE_CLOSE.encode()
_CAPABILITIES = attrs.evolve(
    LEASE_STORE, batch=True, pause=True, trigger=True, retries=True, membership=True
)
"""Every rule by the server's clock, batches (`claim_many`), pause (P1), trigger (X1), retries
(L12) and the fleet's member list (M1)."""


class PostgresStore(PauseAndTrigger, Membership, LeaseStore):
    """Lease store in PostgreSQL: each claim is one call of the server-side claim function, which
    serializes the claims of one job on a row lock in ``<table>_jobs`` (C1) and keeps L1-L11 and
    P1 as `memory://` does. The clock is the server's ``clock_timestamp()``, read after the lock (T1).

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
        self._lock_timeout = lock_timeout_setting(options.statement_timeout_ms)
        self._sql = Statements.build(self.names, self._lock_timeout)
        self._encoding = "utf-8"
        """The connections' client encoding (as Python names it), for requests sent inline."""
        self._read_only = False
        """Opened with `open_read_only`: a permission error names the rights of a reader."""
        self._control = ControlStatements.build(self.names)
        self._control_tables = True
        """The pauses and triggers tables exist (False: a schema from before them, read-only)."""
        self._keeps_pauses = True
        """The claim functions keep P1 (False: an older body the user may not replace)."""
        self._members = MemberStatements.build(self.names)
        self._members_table = True
        """The members table exists (False: a schema from before it, read-only)."""
        self._db = Connections(
            self._conninfo,
            options,
            pool_name=f"anarchon-{self.names.table}",
            name=repr(self),
            where=self.where,
            error=self._error,
        )
        self._fetchone = self._db.fetchone
        self._fetchall = self._db.fetchall
        self._execute = self._db.execute
        self.answers_where = f"table {self.names.shown(self.names.table)} at {self.where}"
        """How an error about a claim function's answer names it."""
        # The fields of every packed claim request that do not depend on the request.
        self._history_and_timeout = f"{options.history_limit} {self._lock_timeout}"

    @classmethod
    def create(cls, url: str, *, clock: Clock | None = None, **options: object) -> PostgresStore:
        """Build a store directly (tests, examples); open it with ``await store.open()``."""
        parsed = StoreURL.parse(url)
        merged = {**parsed.options(), **options}
        opts = structure_options(PostgresOptions, merged, where=f"{parsed.scheme}://")
        return cls(parsed, opts, clock=clock)

    def __repr__(self) -> str:
        return f"PostgresStore({self.where!r}, table={self.names.shown(self.names.table)!r})"

    @property
    def capabilities(self) -> Capabilities:
        return _CAPABILITIES

    # -- connections -------------------------------------------------------------------------
    def _error(self, exc: BaseException) -> Exception:
        tables = ", ".join(self.names.shown(t) for t in self.names.all_tables)
        return translate(exc, self.where, self._secrets, tables=tables, read_only=self._read_only)

    async def open(self) -> None:
        """Connect, create or check the tables and the claim function, and fill the pool.

        `StoreUnavailable` when the server cannot be reached or refuses the login (the message
        names the URL without its password), `StoreCorrupt` when the tables are not ours,
        `ConfigError` when the user lacks a permission, or with ``durability=replicated`` when
        commits do not wait for a synchronous standby."""
        if self._db.pool is not None:
            return
        conn = await self._db.connect()
        try:
            if self.options.durability == "replicated":
                await check_replicated(conn, self.where)
            self._keeps_pauses = await ensure_schema(conn, self.names)
            self._control_tables = self._members_table = True
            self._sql = self._sql.rendered(conn)
            self._encoding = conn.info.encoding
        except psycopg.Error as exc:
            raise self._error(exc) from None
        finally:
            await conn.close()
        await self._db.open()

    async def open_read_only(self) -> None:
        """`SupportsReadOnly` (R1): connect and check with catalog reads that the tables exist
        and the user may read them, creating and changing nothing; then fill the pool.

        `StoreNotSetUp` when the schema or the tables do not exist (naming the schema),
        `ConfigError` naming the rights the user lacks (``USAGE`` on the schema, ``SELECT`` on
        the tables: all `history`, `jobs` and `now_ms` need), `StoreCorrupt` and
        `StoreUnavailable` as for `open`. Claims, renew, finish and release are not for such a
        store (a user with only those rights is refused them by the server)."""
        if self._db.pool is not None:
            return
        self._read_only = True
        conn = await self._db.connect()
        try:
            self._control_tables = await check_readable(conn, self.names, self.where)
            self._members_table = self._control_tables
            self._sql = self._sql.rendered(conn)
            self._encoding = conn.info.encoding
        except psycopg.Error as exc:
            raise self._error(exc) from None
        finally:
            await conn.close()
        await self._db.open()

    async def close(self) -> None:
        await self._db.close()

    def _now_param(self) -> int | None:
        return None if self.clock is None else self.clock()

    # -- claims (L1-L6, L10, L11) ----------------------------------------------------------
    def _packed(self, request: ClaimRequest) -> str:
        """The claim function's one argument (`_function.REQUEST_FIELDS`)."""
        now = "" if self.clock is None else self.clock()
        return (
            f"{self.options.prefix} {request.job} {request.slot} {request.token} "
            f"{request.max_late_ms} {1 if request.overlap is Overlap.SKIP else 0} {now} "
            f"{request.lease_ms} {request.attempts} "
            f"{keep_until(request, self.options.retention_margin_ms)} "
            f"{self._history_and_timeout} {request.instance}"
        )

    async def claim(self, request: ClaimRequest) -> Claim:
        packed = self._packed(request)
        row = await self._fetchone(*self._claim_call(packed, request.skip_reason))
        return claim_from_answer(row[0], request, self.answers_where)

    def _claim_call(
        self, packed: str, skip_reason: str | None = None
    ) -> tuple[Any, tuple[str, str | None] | None]:
        """The claim function's call for one packed request, and its parameters: the request
        inline as a dollar-quoted literal, with no parameters (`Statements.claim_inline`); as
        parameters if the request has a skip reason (rare: free text, not worth quoting), if
        the literal would end before the closing quote (the request holds the quote, or ends
        with its start, ``$q``) or if the connection's encoding cannot carry it."""
        head = self._sql.claim_inline
        if (
            skip_reason is None
            and isinstance(head, bytes)
            and INLINE_QUOTE not in packed
            and not packed.endswith("$q")
        ):
            try:
                return head + packed.encode(self._encoding) + _INLINE_CLOSE, None
            except UnicodeEncodeError:
                pass
        return self._sql.claim, (packed, skip_reason)

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
        rows = await self._fetchall(
            self._sql.claim_many,
            ([self._packed(batch[i]) for i in order], [batch[i].skip_reason for i in order]),
        )
        if len(rows) != len(batch):
            raise StoreCorrupt(
                f"the claim function of {self.answers_where} answered {len(rows)} rows for "
                f"{len(batch)} requests; reopen the store"
            )
        result: list[Claim | None] = [None] * len(batch)
        for n, answer in rows:
            position = order[n - 1]
            result[position] = claim_from_answer(answer, batch[position], self.answers_where)
        return [c for c in result if c is not None]

    async def _claim_slot(self, batch: list[ClaimRequest], slot: int) -> list[Claim]:
        """Distinct jobs of one slot: one call of the batch function (see `_batch`)."""
        params = pack_slot_batch(
            batch,
            prefix=self.options.prefix,
            slot=slot,
            margin_ms=self.options.retention_margin_ms,
            tail=(self.options.history_limit, self._lock_timeout, self._now_param()),
        )
        added: list[str] = []
        for _ in range(2):
            rows = await self._fetchall(self._sql.claim_slot, params)
            missing = missing_jobs(rows)
            if missing is None:
                return read_slot_answers(rows, batch, self.answers_where)
            added = missing
            await self._execute(self._sql.add_jobs, (self.options.prefix, added))
            # then again: the batch claimed nothing for the pending requests
        raise StoreCorrupt(
            f"job rows of {self.names.shown(self.names.jobs_table)} vanished as soon as they were "
            f"inserted ({', '.join(added[:5])} ...): something else deletes them"
        )

    async def check(self, request: ClaimRequest) -> Claim:
        """L10: the claim function, whose first step is the plain read a backup's check needs: a
        finished run or a live lease is answered by that read, with no lock and no write; only a
        run that is missing or whose lease ran out goes on to the claim step. (A plain
        ``SELECT`` of the run, planned on every call, then decided here, costs a check more.)"""
        return await self.claim(request)

    # -- the lease holder's writes (L7-L9): one UPDATE each, token and status compared ------
    async def _update(
        self,
        statement: Any,
        values: tuple[Any, ...],
        job: str,
        slot: int,
        token: str,
    ) -> bool:
        params = (*values, self.options.prefix, job, slot, token)

        async def step(cur: Cursor) -> bool:
            await cur.execute(statement, params)
            return cur.rowcount == 1

        return await self._db.run(step)

    async def renew(self, job: str, slot: int, token: str, lease_ms: int) -> bool:
        return await self._update(self._sql.renew, (self._now_param(), lease_ms), job, slot, token)

    async def finish(
        self, job: str, slot: int, token: str, status: RunStatus, error: str | None = None
    ) -> bool:
        """L8 with C2: the UPDATE while running with `token` (one round trip, the usual
        finish); when it changed nothing, a read of the run: True with nothing written if it
        finished with this token and `status` already (a resend whose first reply was lost),
        else False (fenced). So a broken connection's finish is resent safely."""
        if not status.finished or status is RunStatus.SKIPPED:
            raise ValueError(f"finish needs succeeded, failed or interrupted, got {status}")
        if await self._update(
            self._sql.finish,
            (status.value, self._now_param(), error, error, error),
            job,
            slot,
            token,
        ):
            return True
        rows = await self._fetchall(self._sql.finished, (self.options.prefix, job, slot, token))
        return bool(rows) and rows[0][0] == status.value

    async def release(self, job: str, slot: int, token: str) -> bool:
        return await self._update(self._sql.release, (self._now_param(),), job, slot, token)

    async def retry(self, job: str, slot: int, token: str, error: str, delay_ms: int) -> bool:
        """`SupportsRetry` (L12): one UPDATE while running with `token`: the failed try joins
        the try log and the run waits `delay_ms` by the database's clock."""
        params = (error, error, error, error, error, self._now_param(), delay_ms)
        return await self._update(self._sql.retry, params, job, slot, token)

    # -- reads ---------------------------------------------------------------------------------
    async def history(self, job: str, limit: int = 100) -> list[RunRecord]:
        if isinstance(limit, bool) or not isinstance(limit, int) or limit < 0:
            raise ConfigError(f"history limit must be an int >= 0, got {limit!r}")
        where = self.names.shown(self.names.table)

        rows = await self._fetchall(self._sql.history, (self.options.prefix, job, limit))
        # A row that cannot be read is named (DamagedHistory) while the others still come back.
        reader = HistoryReader(job)
        for row in rows:
            reader.read(
                functools.partial(run_from_row, row, job, where), key=f"slot {row[0]}", slot=row[0]
            )
        return reader.result()

    async def jobs(self) -> list[str]:
        """`SupportsJobList`: the jobs of this prefix with a remembered run or a floor."""

        rows = await self._fetchall(self._sql.jobs, (self.options.prefix, self.options.prefix))
        return [str(row[0]) for row in rows]

    async def now_ms(self) -> int:
        """The server's ``clock_timestamp()`` in epoch ms (T1)."""

        row = await self._fetchone(self._sql.now, (self._now_param(),))
        return int(row[0])
