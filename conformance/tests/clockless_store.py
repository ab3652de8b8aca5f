"""A lease store with no clock of its own, as a third party writes one, and its broken variants.

``clockless:///path/to/file.db`` keeps its runs in a SQLite file that several OS processes share
(one ``BEGIN IMMEDIATE`` transaction per claim), but, like a store reached through an HTTP
gateway that keeps leases as plain fields (etcd), it has no clock to read: `now_ms()` is None
and ``store_clock=False``, so every instance judges lateness and lease expiry by its own
corrected clock (T1 for clockless stores), the ``now`` it passes to `decide_claim`. It is built
only from `anarchon.backend`, and the kit must certify it.

``?variant=`` picks a deliberately broken class (through `ClaimStore.from_url`); the kit must
refuse each one, naming its rule: ``yes-man`` (C1), ``amnesiac`` (T3: forgets a finished run),
``unfenced`` (L7: renew, finish and release with any token), ``client-clock`` (T1: says it has a
store clock, but reads the claiming client's).
"""

from __future__ import annotations

import sqlite3
import time
from collections.abc import Callable
from typing import TYPE_CHECKING, Any, ClassVar, TypeVar

import attrs

from anarchon import hookimpl
from anarchon.backend import (
    LEASE_STORE,
    Capabilities,
    Claim,
    ClaimRequest,
    ConfigError,
    LeaseStore,
    Outcome,
    RunRecord,
    RunStatus,
    StoreOptions,
    StoreURL,
    decide_claim,
    decide_finish,
)
from anarchon.plugins import BackendRegistry
from anarchon_conformance import DEFAULT_PREFIX, BackendHarness

if TYPE_CHECKING:
    from typing_extensions import Self

T = TypeVar("T")

COLUMNS = "job, slot, status, attempt, token, holder, claimed_at, lease_until, finished_at, error"
VARIANTS = ("sound", "yes-man", "amnesiac", "unfenced", "client-clock")


def _check_variant(_: object, attribute: attrs.Attribute[str], value: str) -> None:
    if value not in VARIANTS:
        raise ConfigError(f"variant must be one of {', '.join(VARIANTS)}, got {value!r}")


@attrs.frozen(kw_only=True)
class ClocklessOptions(StoreOptions):
    variant: str = attrs.field(default="sound", validator=_check_variant)


def wall_ms() -> int:
    """This instance's clock: the only clock a clockless store has."""
    return time.time_ns() // 1_000_000


class ClocklessStore(LeaseStore):
    """Runs in one SQLite table; decisions by `decide_claim` at the instance's clock."""

    Options: ClassVar[type[StoreOptions]] = ClocklessOptions

    def __init__(self, url: StoreURL, options: StoreOptions) -> None:
        self.path = "/" + url.path.lstrip("/")
        self.options = options
        self._db: sqlite3.Connection | None = None

    @classmethod
    def from_url(cls, url: StoreURL, options: StoreOptions) -> Self:
        assert isinstance(options, ClocklessOptions)
        chosen: type[ClocklessStore] = _CLASSES[options.variant]
        return chosen(url, options)  # type: ignore[return-value]

    @property
    def capabilities(self) -> Capabilities:
        return attrs.evolve(LEASE_STORE, store_clock=False)

    async def open(self) -> None:
        self._db = sqlite3.connect(self.path, timeout=30, isolation_level=None)
        self._db.execute("PRAGMA journal_mode=WAL")
        self._db.execute(
            "CREATE TABLE IF NOT EXISTS runs (prefix TEXT NOT NULL, job TEXT NOT NULL, "
            "slot INTEGER NOT NULL, status TEXT NOT NULL, attempt INTEGER NOT NULL, "
            "token TEXT NOT NULL, holder TEXT NOT NULL, claimed_at INTEGER, "
            "lease_until INTEGER, finished_at INTEGER, error TEXT, "
            "PRIMARY KEY (prefix, job, slot))"
        )

    async def close(self) -> None:
        if self._db is not None:
            self._db.close()
            self._db = None

    async def now_ms(self) -> int | None:
        return None

    def clock(self) -> int:
        """The ``now`` of every decision: the instance's clock (T1 for clockless stores)."""
        return wall_ms()

    # -- one transaction per step ---------------------------------------------------------------
    def _tx(self, body: Callable[[sqlite3.Connection], T]) -> T:
        assert self._db is not None, "open the store first"
        self._db.execute("BEGIN IMMEDIATE")
        try:
            result = body(self._db)
        except BaseException:
            self._db.execute("ROLLBACK")
            raise
        self._db.execute("COMMIT")
        return result

    def _read(self, db: sqlite3.Connection, job: str, slot: int) -> RunRecord | None:
        row = db.execute(
            f"SELECT {COLUMNS} FROM runs WHERE prefix = ? AND job = ? AND slot = ?",
            (self.options.prefix, job, slot),
        ).fetchone()
        return None if row is None else _record(row)

    def _write(self, db: sqlite3.Connection, run: RunRecord) -> None:
        db.execute(
            f"INSERT OR REPLACE INTO runs (prefix, {COLUMNS}) VALUES (?,?,?,?,?,?,?,?,?,?,?)",
            (
                *(self.options.prefix, run.job, run.slot, run.status.value, run.attempt),
                *(run.token, run.holder, run.claimed_at, run.lease_until, run.finished_at),
                run.error,
            ),
        )

    # -- the claim step -------------------------------------------------------------------------
    async def claim(self, request: ClaimRequest) -> Claim:
        now = self.clock()

        def step(db: sqlite3.Connection) -> Claim:
            def other_live() -> int | None:
                row = db.execute(
                    "SELECT slot FROM runs WHERE prefix = ? AND job = ? AND slot <> ? AND "
                    "status = 'running' AND lease_until >= ? LIMIT 1",
                    (self.options.prefix, request.job, request.slot, now),
                ).fetchone()
                return None if row is None else int(row[0])

            run = self._read(db, request.job, request.slot)
            answer, write = decide_claim(run, request, now, floor=None, other_live=other_live)
            if write is not None:
                self._write(db, write)
            return answer

        return self._tx(step)

    async def check(self, request: ClaimRequest) -> Claim:
        assert self._db is not None, "open the store first"
        run = self._read(self._db, request.job, request.slot)
        if run is not None and (
            run.status is not RunStatus.RUNNING
            or run.token == request.token
            or (run.lease_until or 0) >= self.clock()
        ):
            answer, _ = decide_claim(run, request, self.clock(), floor=None, other_live=_none)
            return answer
        return await self.claim(request)

    # -- the holder's calls ---------------------------------------------------------------------
    def _holds(self, run: RunRecord | None, token: str) -> bool:
        return run is not None and run.status is RunStatus.RUNNING and run.token == token

    def _change(self, job: str, slot: int, token: str, change: Callable[[RunRecord], Any]) -> bool:
        def step(db: sqlite3.Connection) -> bool:
            run = self._read(db, job, slot)
            if run is None or not self._holds(run, token):
                return False
            self._write(db, change(run))
            return True

        return self._tx(step)

    async def renew(self, job: str, slot: int, token: str, lease_ms: int) -> bool:
        now = self.clock()
        return self._change(job, slot, token, lambda r: attrs.evolve(r, lease_until=now + lease_ms))

    async def release(self, job: str, slot: int, token: str) -> bool:
        now = self.clock()
        return self._change(job, slot, token, lambda r: attrs.evolve(r, lease_until=now - 1))

    async def finish(
        self, job: str, slot: int, token: str, status: RunStatus, error: str | None = None
    ) -> bool:
        if not status.finished or status is RunStatus.SKIPPED:
            raise ValueError(f"finish needs succeeded, failed or interrupted, got {status}")
        now = self.clock()

        def step(db: sqlite3.Connection) -> bool:
            run = self._read(db, job, slot)
            verdict = decide_finish(run, token, status) if self._fenced() else "write"
            if verdict == "write" and run is not None and run.status is RunStatus.RUNNING:
                done = attrs.evolve(run, status=status, finished_at=now, error=error)
                self._write(db, done)
                self._finished(db, done)
                return True
            return verdict == "again"

        return self._tx(step)

    def _fenced(self) -> bool:
        return True

    def _finished(self, db: sqlite3.Connection, run: RunRecord) -> None:
        """Called after a finish is written (the amnesiac forgets the run here)."""

    async def history(self, job: str, limit: int = 100) -> list[RunRecord]:
        assert self._db is not None, "open the store first"
        rows = self._db.execute(
            f"SELECT {COLUMNS} FROM runs WHERE prefix = ? AND job = ? ORDER BY slot DESC LIMIT ?",
            (self.options.prefix, job, limit),
        ).fetchall()
        return [_record(row) for row in rows]


def _none() -> None:
    return None


def _record(row: tuple[Any, ...]) -> RunRecord:
    job, slot, status, attempt, token, holder, claimed_at, lease_until, finished_at, error = row
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


# -- the broken variants --------------------------------------------------------------------------
class YesMan(ClocklessStore):
    """Breaks C1: answers `won` to every claim."""

    async def claim(self, request: ClaimRequest) -> Claim:
        answer = await super().claim(request)
        return attrs.evolve(answer, outcome=Outcome.WON, attempt=max(answer.attempt, 1))


class Amnesiac(ClocklessStore):
    """Breaks T3: forgets a run as soon as it finished, so a late claim can win it again."""

    def _finished(self, db: sqlite3.Connection, run: RunRecord) -> None:
        db.execute(
            "DELETE FROM runs WHERE prefix = ? AND job = ? AND slot = ?",
            (self.options.prefix, run.job, run.slot),
        )


class Unfenced(ClocklessStore):
    """Breaks L7-L9: renew, finish and release do not compare tokens."""

    def _holds(self, run: RunRecord | None, token: str) -> bool:
        return run is not None and run.status is RunStatus.RUNNING

    def _fenced(self) -> bool:
        return False


class ClientClock(ClocklessStore):
    """Breaks T1: says it has a store clock (``store_clock=True``, `now_ms` answers), but the
    clock is the claiming client's, so a client whose clock runs ahead takes a live lease over."""

    @property
    def capabilities(self) -> Capabilities:
        return LEASE_STORE

    async def now_ms(self) -> int | None:
        return self.clock()


_CLASSES: dict[str, type[ClocklessStore]] = {
    "sound": ClocklessStore,
    "yes-man": YesMan,
    "amnesiac": Amnesiac,
    "unfenced": Unfenced,
    "client-clock": ClientClock,
}


@hookimpl
def anarchon_register_backends(registry: BackendRegistry) -> None:
    registry.add(
        "clockless",
        "clockless_store:ClocklessStore",
        "a lease store with no clock of its own (the conformance kit's own tests)",
    )


# -- harnesses ------------------------------------------------------------------------------------
class ClocklessHarness(BackendHarness):
    """A fresh file per harness; the backdoors read and write it with plain SQL."""

    plugins = ("clockless_store",)
    variant: ClassVar[str] = "sound"

    def __init__(self, url: str | None = None) -> None:
        super().__init__(url)
        import tempfile

        self.directory = tempfile.mkdtemp(prefix="anarchon-clockless-")
        self.path = f"{self.directory}/runs.db"

    @property
    def backend_name(self) -> str:
        return f"clockless-{self.variant}"

    def url(self, address: tuple[str, int] | None = None) -> str:
        return f"clockless://{self.path}?variant={self.variant}"

    @property
    def capabilities(self) -> Capabilities:
        return _CLASSES[self.variant](StoreURL.parse(self.url()), ClocklessOptions()).capabilities

    async def cleanup(self) -> None:
        await super().cleanup()
        import shutil

        shutil.rmtree(self.directory, ignore_errors=True)

    def _sql(self, query: str, *params: Any) -> list[tuple[Any, ...]]:
        db = sqlite3.connect(self.path, timeout=30, isolation_level=None)
        try:
            return db.execute(query, params).fetchall()
        finally:
            db.close()

    async def force_expire(self, job: str, slot: int, *, prefix: str = DEFAULT_PREFIX) -> None:
        # No store clock: "now" is the instance's clock, this process's wall clock.
        self._sql(
            "UPDATE runs SET lease_until = ? WHERE prefix = ? AND job = ? AND slot = ?",
            wall_ms() - 1,
            prefix,
            job,
            slot,
        )

    async def raw_run(
        self, job: str, slot: int, *, prefix: str = DEFAULT_PREFIX
    ) -> RunRecord | None:
        rows = self._sql(
            f"SELECT {COLUMNS} FROM runs WHERE prefix = ? AND job = ? AND slot = ?",
            prefix,
            job,
            slot,
        )
        return _record(rows[0]) if rows else None


class YesManHarness(ClocklessHarness):
    variant = "yes-man"


class AmnesiacHarness(ClocklessHarness):
    variant = "amnesiac"


class UnfencedHarness(ClocklessHarness):
    variant = "unfenced"


class ClientClockHarness(ClocklessHarness):
    variant = "client-clock"
