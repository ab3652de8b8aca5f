"""`mariadb://user:password@host:port/database`: leases in two InnoDB tables.

Each claim is one transaction that first locks the job's row in ``<table>_jobs`` (so claims of
one job are serialised, C1), then reads the server's clock (T1: ``NOW(3)``, read after the
lock), the run and the job's floor, and lets `anarchon.backend.decide_claim` apply L1-L6 and the
ledger (S1); it writes what that returns. renew, finish and release are single
``UPDATE ... WHERE token = ...`` statements (L7-L9); a finish that matches nothing asks
`decide_finish` whether it is its own resend (C2 for finish). Everything comes from
`anarchon.backend`, the module in-tree backends use.
"""

from __future__ import annotations

import re
from collections.abc import Awaitable, Callable
from typing import Any, ClassVar, TypeVar

import aiomysql  # type: ignore[import-untyped]
import attrs
import pymysql  # type: ignore[import-untyped]

from anarchon.backend import (
    LEASE_STORE,
    Capabilities,
    Claim,
    ClaimRequest,
    ConfigError,
    LeaseStore,
    Overlap,
    RunRecord,
    RunStatus,
    StoreOptions,
    StoreUnavailable,
    StoreURL,
    decide_claim,
    decide_finish,
    keep_until,
    shown_url,
    sweeps_now,
)

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

    @property
    def capabilities(self) -> Capabilities:
        return LEASE_STORE  # every rule, by the server's clock, runs never forgotten too early

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
            raise StoreUnavailable(
                f"cannot reach MariaDB at {shown_url(self.url)}: {exc}"
            ) from None
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
        where = shown_url(self.url)
        for _ in range(10):
            try:
                conn = await self._pool.acquire()
            except TRANSPORT as exc:
                raise StoreUnavailable(f"cannot reach MariaDB at {where}: {exc}") from None
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
                raise StoreUnavailable(f"MariaDB at {where}: {exc}") from None
            except TRANSPORT as exc:
                conn.close()
                raise StoreUnavailable(f"MariaDB at {where}: {exc}") from None
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
        return await self._run(lambda cur: self._claim(cur, request), transaction=True)

    async def _claim(self, cur: Any, request: ClaimRequest) -> Claim:
        key = (self.options.prefix, request.job)
        await cur.execute(  # the job's row: created once, locked by every claim of the job
            f"INSERT INTO {self.jobs} (prefix, job) VALUES (%s, %s) "
            "ON DUPLICATE KEY UPDATE job = job",
            key,
        )
        await cur.execute(
            f"SELECT floor FROM {self.jobs} WHERE prefix = %s AND job = %s FOR UPDATE", key
        )
        (floor,) = await cur.fetchone()
        now = await _now(cur)  # after the lock: the instant this claim is decided at (T1)
        run = await self._read(cur, request.job, request.slot)
        holding = None
        if run is None and request.overlap is Overlap.SKIP:
            await cur.execute(
                f"SELECT slot FROM {self.runs} WHERE prefix = %s AND job = %s AND slot <> %s "
                "AND status = 'running' AND lease_until >= %s LIMIT 1",
                (*key, request.slot, now),
            )
            row = await cur.fetchone()
            holding = None if row is None else int(row[0])
        answer, write = decide_claim(run, request, now, floor=floor, other_live=lambda: holding)
        if write is not None:
            keep = keep_until(request, self.options.retention_margin_ms)
            await cur.execute(
                f"INSERT INTO {self.runs} (prefix, job, {COLUMNS}, keep_until) VALUES "
                "(%s, %s, %s, %s, %s, %s, %s, %s, %s, %s, %s, %s) ON DUPLICATE KEY UPDATE "
                + ", ".join(f"{c} = VALUES({c})" for c in COLUMNS.split(", ")[1:]),
                (*key, *_row(write), keep),
            )
            if run is None and sweeps_now(request.job, request.slot, self.options.history_limit):
                await self._sweep(cur, request.job, now)
        return answer

    async def _sweep(self, cur: Any, job: str, now: int) -> None:
        """L11: forget the oldest runs beyond `history_limit` once past their horizon; the
        newest forgotten slot becomes the job's floor, below which every claim is late."""
        await cur.execute(
            f"SELECT slot, keep_until, status, lease_until FROM {self.runs} "
            "WHERE prefix = %s AND job = %s ORDER BY slot DESC LIMIT 1000000 OFFSET %s",
            (self.options.prefix, job, self.options.history_limit),
        )
        forget = None
        for slot, keep, status, lease_until in reversed(await cur.fetchall()):
            if keep >= now or (status == "running" and lease_until >= now):
                break
            forget = slot
        if forget is not None:
            where = "WHERE prefix = %s AND job = %s"
            await cur.execute(
                f"DELETE FROM {self.runs} {where} AND slot <= %s",
                (self.options.prefix, job, forget),
            )
            await cur.execute(
                f"UPDATE {self.jobs} SET floor = GREATEST(COALESCE(floor, %s), %s) {where}",
                (forget, forget, self.options.prefix, job),
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
        if run is not None and (
            run.status is not RunStatus.RUNNING
            or run.token == request.token
            or (run.lease_until or 0) >= now
        ):  # decided without writing: skipped, done (L6), won (L2) or running (L3)
            return decide_claim(run, request, now, floor=None, other_live=lambda: None)[0]
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
        # Nothing matched: fenced, or the resend of a finish whose answer was lost (C2). A
        # finished row never changes again, so this read after the UPDATE is enough.
        run = await self._run(lambda cur: self._read(cur, job, slot))
        return decide_finish(run, token, status) == "again"

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


def _row(run: RunRecord) -> tuple[Any, ...]:
    return (
        *(run.slot, run.status.value, run.attempt, run.token, run.holder),
        *(run.claimed_at, run.lease_until, run.finished_at, run.error),
    )


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
