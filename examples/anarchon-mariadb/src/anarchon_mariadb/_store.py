"""`mariadb://user:password@host:port/database`: leases in two InnoDB tables.

Each claim is one transaction that first locks the job's row in ``<table>_jobs`` with
``SELECT ... FOR UPDATE`` (so claims of one job are serialised, C1), then reads the server's clock
(T1: ``NOW(3)``, read after the lock), decides by the lease table L1-L6, and writes. A slot it
decides not to run (late, the caller's `skip_reason`, overlap) is written as a ``skipped`` row in
that transaction (the ledger, S1). renew, finish and release are single
``UPDATE ... WHERE token = ...`` statements (L7-L9); a finish that matches nothing reads the row
to recognise its own resend (C2).
"""

from __future__ import annotations

import re
from collections.abc import Awaitable, Callable
from typing import Any, ClassVar, TypeVar

import aiomysql  # type: ignore[import-untyped]
import attrs
import pymysql  # type: ignore[import-untyped]

from anarchon import (
    Capabilities,
    Claim,
    ClaimRequest,
    ConfigError,
    Outcome,
    Overlap,
    RunRecord,
    RunStatus,
    StoreOptions,
    StoreUnavailable,
    StoreURL,
)
from anarchon.abc import LeaseStore

__all__ = ["MariaDBOptions", "MariaDBStore"]

T = TypeVar("T")

NOW_MS = "CAST(UNIX_TIMESTAMP(NOW(3)) * 1000 AS SIGNED)"
COLUMNS = "slot, status, attempt, token, holder, claimed_at, lease_until, finished_at, error"
RETRY = {1205, 1213}
"""Lock wait timeout and deadlock: the server rolled the claim back, so it is safe to run again."""
TRANSPORT = (pymysql.err.OperationalError, pymysql.err.InterfaceError, OSError, EOFError)


def _check_table(_: object, attribute: attrs.Attribute[str], value: str) -> None:
    if not re.fullmatch(r"[A-Za-z][A-Za-z0-9_]{0,40}", value):
        raise ConfigError(
            f"table must be a letter then up to 40 letters, digits or _, got {value!r}"
        )


@attrs.frozen(kw_only=True)
class MariaDBOptions(StoreOptions):
    table: str = attrs.field(default="anarchon", validator=_check_table)
    """Tables ``<table>_runs`` and ``<table>_jobs`` are created in the URL's database."""
    pool_size: int = 5


class MariaDBStore(LeaseStore):
    """Lease store on MariaDB (or MySQL) with InnoDB row locks."""

    Options: ClassVar[type[StoreOptions]] = MariaDBOptions

    def __init__(self, url: StoreURL, options: StoreOptions) -> None:
        if not isinstance(options, MariaDBOptions):
            raise TypeError(f"MariaDBStore needs MariaDBOptions, got {type(options).__name__}")
        self.url = url
        self.options = options
        self.runs = f"{options.table}_runs"
        self.jobs = f"{options.table}_jobs"
        self._pool: aiomysql.Pool | None = None
        self._known_jobs: set[str] = set()

    @property
    def capabilities(self) -> Capabilities:
        return Capabilities(
            leases=True,
            self_recognition=True,
            fencing=True,
            overlap=True,
            history=True,
            store_clock=True,
            skips=True,
            remembers_ms=None,
        )

    # -- connections ----------------------------------------------------------------------------
    async def open(self) -> None:
        try:
            self._pool = await aiomysql.create_pool(
                host=self.url.host or "127.0.0.1",
                port=self.url.port or 3306,
                user=self.url.username or "root",
                password=self.url.password or "",
                db=self.url.path or "test",
                autocommit=True,
                # Count the rows an UPDATE matched, not only those it changed: a release in the
                # same millisecond as the previous write changes nothing and must still be True.
                client_flag=pymysql.constants.CLIENT.FOUND_ROWS,
                minsize=1,
                maxsize=self.options.pool_size,
                connect_timeout=5,
            )
        except TRANSPORT as exc:
            raise StoreUnavailable(f"cannot reach MariaDB at {self.url}: {exc}") from None
        await self._run(self._create_schema)

    async def close(self) -> None:
        if self._pool is not None:
            self._pool.close()
            await self._pool.wait_closed()
            self._pool = None

    async def _run(self, body: Callable[[Any], Awaitable[T]], *, transaction: bool = False) -> T:
        """Run `body(cursor)` on a pooled connection; transport errors become StoreUnavailable
        (the caller may resend, C2) and the broken connection is thrown away."""
        if self._pool is None:
            raise StoreUnavailable("the store is not open: await store.open() first")
        for _ in range(10):
            try:
                conn = await self._pool.acquire()
            except TRANSPORT as exc:
                raise StoreUnavailable(f"cannot reach MariaDB at {self.url}: {exc}") from None
            try:
                if transaction:
                    await conn.begin()
                async with conn.cursor() as cur:
                    result = await body(cur)
                if transaction:
                    await conn.commit()
                return result
            except pymysql.err.OperationalError as exc:
                if exc.args and exc.args[0] in RETRY:
                    await conn.rollback()
                    continue
                conn.close()
                raise StoreUnavailable(f"MariaDB at {self.url}: {exc}") from None
            except TRANSPORT as exc:
                conn.close()
                raise StoreUnavailable(f"MariaDB at {self.url}: {exc}") from None
            except BaseException:
                conn.close()
                raise
            finally:
                self._pool.release(conn)
        raise StoreUnavailable("MariaDB kept rolling the claim back (deadlocks)")

    async def _create_schema(self, cur: Any) -> None:
        await cur.execute("SET SESSION sql_notes = 0")  # no "table already exists" notes
        await cur.execute(
            f"CREATE TABLE IF NOT EXISTS {self.jobs} (prefix VARCHAR(100) NOT NULL, "
            "job VARCHAR(100) NOT NULL, floor BIGINT NULL, PRIMARY KEY (prefix, job)) ENGINE=InnoDB"
        )
        await cur.execute(
            f"CREATE TABLE IF NOT EXISTS {self.runs} (prefix VARCHAR(100) NOT NULL, "
            "job VARCHAR(100) NOT NULL, slot BIGINT NOT NULL, status VARCHAR(16) NOT NULL, "
            "attempt INT NOT NULL, token CHAR(32) NOT NULL, holder VARCHAR(255) NOT NULL, "
            "claimed_at BIGINT, lease_until BIGINT, finished_at BIGINT, error TEXT, "
            "keep_until BIGINT NOT NULL, PRIMARY KEY (prefix, job, slot)) ENGINE=InnoDB"
        )
        await cur.execute("SET SESSION sql_notes = 1")

    # -- the claim step -------------------------------------------------------------------------
    async def claim(self, request: ClaimRequest) -> Claim:
        if request.job not in self._known_jobs:
            await self._run(
                lambda cur: cur.execute(
                    f"INSERT INTO {self.jobs} (prefix, job) VALUES (%s, %s) "
                    "ON DUPLICATE KEY UPDATE job = job",
                    (self.options.prefix, request.job),
                )
            )
            self._known_jobs.add(request.job)
        return await self._run(lambda cur: self._claim(cur, request), transaction=True)

    async def _claim(self, cur: Any, request: ClaimRequest) -> Claim:
        key = (self.options.prefix, request.job)
        await cur.execute(
            f"SELECT floor FROM {self.jobs} WHERE prefix = %s AND job = %s FOR UPDATE", key
        )
        (floor,) = await cur.fetchone()
        now = await _now(cur)  # after the lock: the instant this claim is decided at (T1)
        run = await self._read(cur, request.job, request.slot)
        if run is None:  # L1, in this order
            if floor is not None and request.slot <= floor:  # L11: ran and deleted? write nothing
                return Claim(outcome=Outcome.LATE, reason=f"forgotten: slot <= floor {floor}")
            skip = await self._skip_reason(cur, request, now)
            if skip is not None:  # the ledger (S1): record the decision in this transaction
                await self._insert(cur, request, now, skip)
                return _skipped(request.token, request.instance, skip)
            await self._insert(cur, request, now, None)
            return _answer(Outcome.WON, 1, request.token, request.instance, now + request.lease_ms)
        if run.status is RunStatus.SKIPPED:  # a decided skip answers the same to everyone
            return _skipped(run.token, run.holder, run.error)
        if run.status is not RunStatus.RUNNING:  # L6
            return _answer(Outcome.DONE, run.attempt, run.token, run.holder, run.lease_until)
        if run.token == request.token:  # L2
            return _answer(Outcome.WON, run.attempt, run.token, run.holder, run.lease_until)
        if run.lease_until is not None and run.lease_until >= now:  # L3
            return _answer(Outcome.RUNNING, run.attempt, run.token, run.holder, run.lease_until)
        where = "WHERE prefix = %s AND job = %s AND slot = %s"
        if run.attempt < request.attempts:  # L4: takeover
            await cur.execute(
                f"UPDATE {self.runs} SET attempt = attempt + 1, token = %s, holder = %s, "
                f"claimed_at = %s, lease_until = %s {where}",
                (request.token, request.instance, now, now + request.lease_ms, *key, request.slot),
            )
            lease_until = now + request.lease_ms
            return _answer(
                Outcome.WON, run.attempt + 1, request.token, request.instance, lease_until
            )
        await cur.execute(  # L5
            f"UPDATE {self.runs} SET status = 'interrupted', finished_at = %s, "
            f"error = 'the last attempt''s lease ran out' {where}",
            (now, *key, request.slot),
        )
        return _answer(Outcome.DONE, run.attempt, run.token, run.holder, run.lease_until)

    async def _skip_reason(self, cur: Any, request: ClaimRequest, now: int) -> str | None:
        """L1 steps 2-4 for a slot with no run: why it is not to run (late, the caller's
        reason, overlap naming the slot that holds a lease), or None: it may be won."""
        age = now - request.slot
        if age > request.max_late_ms:
            return f"late: slot is {age} ms old, max_late is {request.max_late_ms} ms"
        if request.skip_reason is not None:
            return request.skip_reason
        if request.overlap is Overlap.SKIP:
            await cur.execute(
                f"SELECT slot FROM {self.runs} WHERE prefix = %s AND job = %s AND slot <> %s "
                "AND status = 'running' AND lease_until >= %s LIMIT 1",
                (self.options.prefix, request.job, request.slot, now),
            )
            holding = await cur.fetchone()
            if holding is not None:
                return (
                    f"overlap: slot {holding[0]} of this job holds a live lease and overlap "
                    "is 'skip'"
                )
        return None

    async def _insert(
        self, cur: Any, request: ClaimRequest, now: int, skip_reason: str | None
    ) -> None:
        """Write the slot's first row: a run (running, attempt 1, a lease) or, with
        `skip_reason`, a skip record (skipped, attempt 0, finished now, the reason as error).
        Both are kept, counted and forgotten alike (L11)."""
        keep = request.slot + request.max_late_ms + request.attempts * request.lease_ms
        row: tuple[str, int, int | None, int | None, str | None]
        if skip_reason is None:
            row = ("running", 1, now + request.lease_ms, None, None)
        else:
            row = ("skipped", 0, None, now, skip_reason)
        status, attempt, lease_until, finished_at, error = row
        await cur.execute(
            f"INSERT INTO {self.runs} (prefix, job, {COLUMNS}, keep_until) VALUES "
            "(%s, %s, %s, %s, %s, %s, %s, %s, %s, %s, %s, %s)",
            (
                *(self.options.prefix, request.job, request.slot, status, attempt),
                *(request.token, request.instance, now, lease_until, finished_at, error),
                keep + self.options.retention_margin_ms,
            ),
        )
        await self._sweep(cur, request.job, now)

    async def _sweep(self, cur: Any, job: str, now: int) -> None:
        """L11: forget the oldest runs beyond `history_limit` once past their horizon; the
        newest forgotten slot becomes the job's floor, below which every claim is late."""
        await cur.execute(
            f"SELECT slot, keep_until, status, lease_until FROM {self.runs} "
            "WHERE prefix = %s AND job = %s ORDER BY slot DESC LIMIT 1000000 OFFSET %s",
            (self.options.prefix, job, self.options.history_limit),
        )
        forget = []
        for slot, keep_until, status, lease_until in reversed(await cur.fetchall()):
            if keep_until >= now or (status == "running" and lease_until >= now):
                break
            forget.append(slot)
        if forget:
            await cur.execute(
                f"DELETE FROM {self.runs} WHERE prefix = %s AND job = %s AND slot <= %s",
                (self.options.prefix, job, max(forget)),
            )
            await cur.execute(
                f"UPDATE {self.jobs} SET floor = GREATEST(COALESCE(floor, %s), %s) "
                "WHERE prefix = %s AND job = %s",
                (max(forget), max(forget), self.options.prefix, job),
            )

    async def _read(self, cur: Any, job: str, slot: int) -> RunRecord | None:
        await cur.execute(
            f"SELECT {COLUMNS} FROM {self.runs} WHERE prefix = %s AND job = %s AND slot = %s",
            (self.options.prefix, job, slot),
        )
        row = await cur.fetchone()
        return None if row is None else _record(job, row)

    async def check(self, request: ClaimRequest) -> Claim:
        """L10: a plain read; only a missing run or an expired lease goes through `claim`."""

        async def read(cur: Any) -> tuple[RunRecord | None, int]:
            return await self._read(cur, request.job, request.slot), await _now(cur)

        run, now = await self._run(read)
        if run is not None:
            if run.status is RunStatus.SKIPPED:
                return _skipped(run.token, run.holder, run.error)
            if run.status is not RunStatus.RUNNING:
                return _answer(Outcome.DONE, run.attempt, run.token, run.holder, run.lease_until)
            if run.token == request.token or (run.lease_until or 0) >= now:
                outcome = Outcome.WON if run.token == request.token else Outcome.RUNNING
                return _answer(outcome, run.attempt, run.token, run.holder, run.lease_until)
        return await self.claim(request)

    # -- the holder's calls (fenced by token) ---------------------------------------------------
    async def _update(
        self, sets: str, params: tuple[Any, ...], job: str, slot: int, token: str
    ) -> bool:
        async def update(cur: Any) -> bool:
            count = await cur.execute(
                f"UPDATE {self.runs} SET {sets} WHERE prefix = %s AND job = %s AND slot = %s "
                "AND status = 'running' AND token = %s",
                (*params, self.options.prefix, job, slot, token),
            )
            return bool(count == 1)

        return await self._run(update)

    async def renew(self, job: str, slot: int, token: str, lease_ms: int) -> bool:
        return await self._update(f"lease_until = {NOW_MS} + %s", (lease_ms,), job, slot, token)

    async def finish(
        self, job: str, slot: int, token: str, status: RunStatus, error: str | None = None
    ) -> bool:
        if status not in (RunStatus.SUCCEEDED, RunStatus.FAILED, RunStatus.INTERRUPTED):
            raise ValueError(f"finish needs succeeded, failed or interrupted, got {status}")
        sets = f"status = %s, error = %s, finished_at = {NOW_MS}"
        if await self._update(sets, (status.value, error), job, slot, token):
            return True
        # C2 for finish: the UPDATE matched nothing. If an earlier finish with this token and
        # status was written and its answer lost, this is its resend: True, nothing written.
        # A finished row never changes again, so this read after the UPDATE is enough.
        run = await self._run(lambda cur: self._read(cur, job, slot))
        return run is not None and run.token == token and run.status is status

    async def release(self, job: str, slot: int, token: str) -> bool:
        return await self._update(f"lease_until = {NOW_MS} - 1", (), job, slot, token)

    async def history(self, job: str, limit: int = 100) -> list[RunRecord]:
        async def read(cur: Any) -> list[RunRecord]:
            await cur.execute(
                f"SELECT {COLUMNS} FROM {self.runs} WHERE prefix = %s AND job = %s "
                "ORDER BY slot DESC LIMIT %s",
                (self.options.prefix, job, limit),
            )
            return [_record(job, row) for row in await cur.fetchall()]

        return await self._run(read)

    async def now_ms(self) -> int:
        return await self._run(_now)


async def _now(cur: Any) -> int:
    await cur.execute(f"SELECT {NOW_MS}")
    (now,) = await cur.fetchone()
    return int(now)


def _record(job: str, row: tuple[Any, ...]) -> RunRecord:
    slot, status, attempt, token, holder, claimed_at, lease_until, finished_at, error = row
    return RunRecord(
        job=job,
        slot=slot,
        status=RunStatus(status),
        attempt=attempt,
        token=token,
        holder=holder,
        claimed_at=claimed_at,
        lease_until=lease_until,
        finished_at=finished_at,
        error=error,
    )


def _answer(
    outcome: Outcome, attempt: int, token: str, holder: str, lease_until: int | None
) -> Claim:
    return Claim(
        outcome=outcome, attempt=attempt, token=token, holder=holder, lease_until=lease_until
    )


def _skipped(token: str, holder: str, reason: str | None) -> Claim:
    """S1: the answer to every claim of a slot whose row is a skip record."""
    return Claim(
        outcome=Outcome.SKIPPED, attempt=0, token=token, holder=holder, reason=reason or "skipped"
    )
