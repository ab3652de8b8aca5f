"""`sqlite:///path`: the embedded lease store. One host, one file, local file systems only."""

from __future__ import annotations

import asyncio
import os
import sqlite3
import time
from collections.abc import Callable, Mapping, Sequence
from typing import ClassVar, TypeVar

import attrs

from anarchon import (
    Capabilities,
    Claim,
    ClaimRequest,
    ConfigError,
    LeaseStore,
    Member,
    Pause,
    RunRecord,
    RunStatus,
    StoreOptions,
    StoreURL,
    Trigger,
    check_name,
)
from anarchon.backend import LEASE_STORE, check_announce, check_instance, shown, structure_options

from . import _members as fleet
from ._control import check_text
from ._options import SQLiteOptions
from ._read_only import check_readable, read
from ._schema import existing_tables
from ._steps import Steps
from ._worker import Worker

__all__ = ["SQLiteStore"]

Clock = Callable[[], int]
T = TypeVar("T")

_CAPABILITIES = attrs.evolve(
    LEASE_STORE, batch=True, pause=True, trigger=True, retries=True, membership=True
)
"""Every rule by this host's clock, batches (`claim_many`), pause (P1), trigger (X1), retries
(L12) and the fleet's member list (M1)."""


def wall_clock_ms() -> int:
    return time.time_ns() // 1_000_000


def database_path(url: StoreURL) -> str:
    """The file named by `url`: ``sqlite:///anarchon.db`` is relative to the working directory,
    ``sqlite:////var/lib/app/anarchon.db`` is absolute."""
    if url.host:
        raise ConfigError(
            f"SQLite URL {url} names a host ({url.host!r}); SQLite files are local: write "
            "sqlite:///relative/path.db or sqlite:////absolute/path.db"
        )
    if not url.path:
        raise ConfigError(
            f"SQLite URL {url} names no file: write sqlite:///anarchon.db (relative) or "
            "sqlite:////absolute/path.db"
        )
    if url.path == ":memory:" or url.path.startswith("file:"):
        raise ConfigError(
            f"SQLite URL {url}: in-memory and URI databases are refused, because each connection "
            "gets its own and instances could not share their claims; use a file such as "
            "sqlite:///anarchon.db"
        )
    return os.path.abspath(url.path)


class SQLiteStore(LeaseStore):
    """Lease store in a SQLite file: each claim is one ``BEGIN IMMEDIATE`` transaction (C1).

    It keeps L1-L11 and P1 exactly as `memory://` does (the decision is the same function,
    `anarchon.backend.decide_claim`), across every process of one host that opens the file.
    The clock is this host's wall clock: every instance sharing the file runs on this host and
    reads the same clock (T1), which is why the file must be on a local file system, never on
    NFS or SMB, where SQLite's locks are not reliable either.

    ``clock`` is for tests only: every store sharing a file must use the same clock.
    """

    Options: ClassVar[type[StoreOptions]] = SQLiteOptions

    def __init__(self, url: StoreURL, options: StoreOptions, *, clock: Clock | None = None) -> None:
        if not isinstance(options, SQLiteOptions):
            raise TypeError(f"SQLiteStore needs SQLiteOptions, got {type(options).__name__}")
        self.url = url
        self.options: SQLiteOptions = options
        self.path = database_path(url)
        self.clock: Clock = clock or wall_clock_ms
        self._worker = Worker(self.path, options.busy_timeout_ms)
        # The lease holder's writes (renew, finish, release) have their own connection and
        # thread, so a heartbeat never waits behind a queue of claims (F1 would fence it).
        self._holder = Worker(self.path, options.busy_timeout_ms)
        self._steps = Steps(
            path=self.path,
            prefix=options.prefix,
            clock=self.clock,
            history_limit=options.history_limit,
            retention_margin_ms=options.retention_margin_ms,
        )
        self._read_only = False

    @classmethod
    def create(
        cls, path: str | os.PathLike[str], *, clock: Clock | None = None, **options: object
    ) -> SQLiteStore:
        """Build a store for a file directly (tests, examples); open it with ``await store.open()``."""
        url = StoreURL.parse("sqlite:///" + os.fspath(path))
        opts = structure_options(SQLiteOptions, options, where="sqlite://")
        return cls(url, opts, clock=clock)

    def __repr__(self) -> str:
        return f"SQLiteStore({self.path!r}, prefix={self.options.prefix!r})"

    @property
    def capabilities(self) -> Capabilities:
        return _CAPABILITIES

    async def open(self) -> None:
        """Open the file (creating it and the tables if needed) and check its tables.

        `ConfigError` when the path cannot hold a database (missing directory, not writable),
        `StoreCorrupt` when the file is not SQLite or its anarchon tables were changed."""
        self._read_only = self._worker.read_only = self._holder.read_only = False
        await self._worker.start()
        try:
            await self._holder.start()
        except BaseException:
            await self._worker.stop()
            raise

    async def open_read_only(self) -> None:
        """`SupportsReadOnly` (R1): open the file to read it, writing nothing, not even SQLite's
        log files when no connection has it open (`anarchon_sqlite._read_only`), so it works on a
        read-only file in a read-only directory. `StoreNotSetUp` when the file does not exist or
        holds no anarchon tables; `StoreCorrupt` as for `open`.

        Each `history` and `jobs` call then reads on a connection of its own; claims and lease
        calls are refused as on a closed store."""
        await asyncio.to_thread(check_readable, self.path, self.options.busy_timeout_ms)
        self._read_only = self._worker.read_only = self._holder.read_only = True

    async def _read(self, fn: Callable[..., T], *args: object) -> T:
        return await asyncio.to_thread(read, self.path, self.options.busy_timeout_ms, fn, *args)

    async def close(self) -> None:
        self._read_only = self._worker.read_only = self._holder.read_only = False
        await self._holder.stop()
        await self._worker.stop()

    async def now_ms(self) -> int:
        """This host's wall clock, the clock every instance sharing the file reads (T1)."""
        return self.clock()

    async def claim(self, request: ClaimRequest) -> Claim:
        return await self._worker.run(self._steps.claim, request)

    async def claim_many(self, requests: Sequence[ClaimRequest]) -> list[Claim]:
        """All requests in one transaction, decided in order at one instant of the clock."""
        batch = list(requests)
        return await self._worker.run(self._steps.claim_many, batch)

    async def check(self, request: ClaimRequest) -> Claim:
        return await self._worker.run(self._steps.check, request)

    async def renew(self, job: str, slot: int, token: str, lease_ms: int) -> bool:
        return await self._holder.run(self._steps.renew, job, slot, token, lease_ms)

    async def finish(
        self, job: str, slot: int, token: str, status: RunStatus, error: str | None = None
    ) -> bool:
        if not status.finished or status is RunStatus.SKIPPED:
            raise ValueError(f"finish needs succeeded, failed or interrupted, got {status}")
        return await self._holder.run(self._steps.finish, job, slot, token, status, error)

    async def release(self, job: str, slot: int, token: str) -> bool:
        return await self._holder.run(self._steps.release, job, slot, token)

    async def retry(self, job: str, slot: int, token: str, error: str, delay_ms: int) -> bool:
        """`SupportsRetry` (L12): log the failed try and hold the run for `delay_ms`."""
        return await self._holder.run(self._steps.retry, job, slot, token, error, delay_ms)

    async def history(self, job: str, limit: int = 100) -> list[RunRecord]:
        if isinstance(limit, bool) or not isinstance(limit, int) or limit < 0:
            raise ConfigError(f"history limit must be an int >= 0, got {limit!r}")
        if self._read_only:
            return await self._read(self._steps.history, job, limit)
        return await self._worker.run(self._steps.history, job, limit)

    async def jobs(self) -> list[str]:
        """`SupportsJobList`: the jobs of this prefix with a remembered run or a floor."""
        if self._read_only:
            return await self._read(self._steps.jobs)
        return await self._worker.run(self._steps.jobs)

    # -- control through the store (P1, X1) -----------------------------------------------------
    async def pause(
        self, job: str, *, until_ms: int | None = None, reason: str = "", by: str = ""
    ) -> Pause:
        """`SupportsPause`: from its commit on, every claim of a new slot of `job` is recorded
        ``skipped: paused`` in its own transaction (P1), until `resume` or `until_ms` (epoch ms,
        exclusive, by this host's clock)."""
        check_name(job)
        check_text(reason, "reason")
        check_text(by, "by")
        return await self._worker.run(self._steps.pause, job, until_ms, reason, by)

    async def resume(self, job: str) -> bool:
        check_name(job)
        return await self._worker.run(self._steps.resume, job)

    async def pauses(self) -> list[Pause]:
        """The pauses in force, by job; [] on a file from before pauses opened read-only."""
        if self._read_only:
            return await self._read(self._steps.pauses)
        return await self._worker.run(self._steps.pauses)

    async def trigger(self, job: str, *, reason: str = "", by: str = "") -> Trigger:
        """`SupportsTrigger` (X1): the ad-hoc slot is this host's clock under the write lock,
        moved off a whole second and past the job's earlier triggers of that millisecond."""
        check_name(job)
        check_text(reason, "reason")
        check_text(by, "by")
        return await self._worker.run(self._steps.trigger, job, reason, by)

    async def triggers(self, since_ms: int) -> list[Trigger]:
        """Triggers asked for at or after `since_ms`, oldest first (kept a day)."""
        if isinstance(since_ms, bool) or not isinstance(since_ms, int):
            raise ConfigError(
                f"since_ms must be an int of epoch milliseconds, got {shown(since_ms)}"
            )
        if self._read_only:
            return await self._read(self._steps.triggers, since_ms)
        return await self._worker.run(self._steps.triggers, since_ms)

    # -- the fleet's member list (M1) -----------------------------------------------------------
    async def announce(
        self, instance: str, ttl_ms: int, stats: Mapping[str, int] | None = None
    ) -> Member:
        """`SupportsMembership` (M1): write or refresh `instance`, live for `ttl_ms` by this
        host's clock, in one transaction (`_members`)."""
        instance, ttl_ms, counters = check_announce(instance, ttl_ms, stats)
        member = await self._worker.run(
            fleet.write, self.clock, fleet.announce, self.options.prefix, instance, ttl_ms, counters
        )
        assert isinstance(member, Member)
        return member

    async def members(self) -> list[Member]:
        """The live members, sorted by instance: one SELECT; [] on a file from before members
        opened read-only."""
        if self._read_only:
            return await self._read(self._list_members)
        return await self._worker.run(self._list_members)

    def _list_members(self, conn: sqlite3.Connection) -> list[Member]:
        if fleet.MEMBERS not in existing_tables(conn):
            return []
        return fleet.list_members(conn, self.options.prefix, self.clock(), self.path)

    async def leave(self, instance: str) -> bool:
        """Remove `instance` now; False if it was not a live member."""
        check_instance(instance)
        gone = await self._worker.run(
            fleet.write, self.clock, fleet.leave, self.options.prefix, instance
        )
        return bool(gone)
