"""The store's atomic steps, run on the worker thread against one sqlite3 connection.

A claim is one ``BEGIN IMMEDIATE`` transaction: SQLite lets one writer in at a time for the whole
file, so everything read after BEGIN IMMEDIATE is current until COMMIT, and the L1-L6 decision
(`anarchon.backend.decide_claim`, shared with `memory://`) is one indivisible step (C1). The win
path is four statements: BEGIN IMMEDIATE, SELECT the run, INSERT it, COMMIT (plus one SELECT of
the floor, and one index seek for retention). A slot decided not to run (late, a caller's skip,
overlap) is INSERTed the same way as a ``skipped`` row (the ledger, S1), so the same transaction
that decides it records it, and later claims read it like any finished run. So is the slot of a
paused job (P1): the claim's one SELECT reads the job's pause too, under the same lock.
"""

from __future__ import annotations

import functools
import sqlite3
from collections.abc import Callable, Sequence
from typing import TypeVar

import attrs

from anarchon import Claim, ClaimRequest, Pause, RunRecord, RunStatus, StoreCorrupt, Trigger
from anarchon.backend import (
    MAX_TRY_LOG_CHARS,
    TRY_SEPARATOR,
    HistoryReader,
    decide_claim,
    decide_finish,
    keep_until,
    late_reason,
    shown,
    skip_record,
    skipped_claim,
    sweeps_now,
)

from . import _control as control
from . import _rows as sql
from ._schema import JOBS, PAUSES, RUNS, TRIGGERS, existing_tables

__all__ = ["Steps"]

APPEND_TRY = (
    "CASE WHEN ?1 IS NULL THEN error "
    f"WHEN error IS NULL OR error = '' THEN substr(?1, -{MAX_TRY_LOG_CHARS}) "
    f"ELSE substr(error || '{TRY_SEPARATOR}' || ?1, -{MAX_TRY_LOG_CHARS}) END"
)
"""L12: the try log (``error``) with the entry ``?1`` appended (NULL: unchanged), its last
`MAX_TRY_LOG_CHARS` characters kept, as `anarchon.backend.append_try` does."""

SWEEP_MAX_ROWS = 100
"""L11: one claim deletes at most this many forgotten runs, so its latency stays bounded."""

Clock = Callable[[], int]
T = TypeVar("T")


def _rollback(conn: sqlite3.Connection) -> None:
    if conn.in_transaction:
        conn.execute("ROLLBACK")


@attrs.frozen
class Steps:
    """The SQL side of one store: its file (for messages), prefix, clock and retention settings."""

    path: str
    prefix: str
    clock: Clock
    history_limit: int
    retention_margin_ms: int

    # -- claims (L1-L6, L10, L11) ------------------------------------------------------------
    def claim(self, conn: sqlite3.Connection, request: ClaimRequest) -> Claim:
        conn.execute("BEGIN IMMEDIATE")
        try:
            claim = self._decide(conn, request, self.clock())  # now: read under the lock (T1)
            conn.execute("COMMIT")
        except BaseException:
            _rollback(conn)
            raise
        return claim

    def claim_many(self, conn: sqlite3.Connection, requests: Sequence[ClaimRequest]) -> list[Claim]:
        conn.execute("BEGIN IMMEDIATE")
        try:
            now = self.clock()
            claims = [self._decide(conn, r, now) for r in requests]
            conn.execute("COMMIT")
        except BaseException:
            _rollback(conn)
            raise
        return claims

    def check(self, conn: sqlite3.Connection, request: ClaimRequest) -> Claim:
        """L10: a plain read (no transaction, so no write lock); the claim step only when the
        run is missing or its lease ran out."""
        row = conn.execute(sql.SELECT_RUN, (self.prefix, request.job, request.slot)).fetchone()
        if row is not None:
            now = self.clock()
            run = sql.run_from_row(row, request.job, self.path)
            if run.status.finished or (run.lease_until is not None and run.lease_until >= now):
                claim, _ = decide_claim(run, request, now, floor=None, other_live=lambda: None)
                return claim
        return self.claim(conn, request)

    def _decide(self, conn: sqlite3.Connection, request: ClaimRequest, now: int) -> Claim:
        key = (self.prefix, request.job, request.slot)
        row = conn.execute(sql.SELECT_FOR_CLAIM, (*key, now)).fetchone()
        run = None if row[0] is None else sql.run_from_row(row[:9], request.job, self.path)
        floor = None if run is not None else self._floor(row[9], request.job)

        def other_live() -> int | None:
            # L1 overlap: the slot holding the live lease is named in the skip record.
            found = conn.execute(
                sql.OTHER_LIVE, (self.prefix, request.job, now, request.slot)
            ).fetchone()
            return None if found is None else self._slot(found[0], request.job)

        paused = row[11]
        write: RunRecord | None
        if run is None and paused is not None and late_reason(request, now, floor) is None:
            # P1: a paused job's new slot is a skip the store decides itself, whatever the
            # request says; a late or forgotten slot stays what L1 makes of it.
            write = skip_record(request, now, str(paused))
            claim = skipped_claim(write)
        else:
            claim, write = decide_claim(run, request, now, floor=floor, other_live=other_live)
        if write is None:
            return claim
        if run is None:  # a new run or a skip record: both are kept and forgotten alike (L11)
            keep = keep_until(request, self.retention_margin_ms)
            conn.execute(sql.INSERT_RUN, (self.prefix, request.job, *_values(write), keep))
            # The oldest run could go: L11 retention may have work to do, done by about one
            # claim in sweep_every(history_limit) (counting walks the job's runs).
            if row[10] and sweeps_now(request.job, request.slot, self.history_limit):
                self._sweep(conn, request.job, now)
        else:
            conn.execute(sql.UPDATE_RUN, (*_values(write)[1:], *key))
        return claim

    def _floor(self, floor: object, job: str) -> int | None:
        if floor is None:
            return None
        if not isinstance(floor, int) or isinstance(floor, bool):
            raise StoreCorrupt(
                f"floor of job {job!r} (prefix {self.prefix!r}) in {self.path} is "
                f"{shown(floor)}; expected a slot in epoch milliseconds: set the job's floor in "
                f"table {JOBS} to the newest slot whose run was deleted"
            )
        return floor

    def _slot(self, slot: object, job: str) -> int:
        if not isinstance(slot, int) or isinstance(slot, bool):
            raise StoreCorrupt(
                f"a running row of job {job!r} (prefix {self.prefix!r}) in {self.path} has slot "
                f"{slot!r}; expected epoch milliseconds: remove or repair the row"
            )
        return slot

    def _sweep(self, conn: sqlite3.Connection, job: str, now: int) -> None:
        """L11, as `memory://` does it: beyond the newest `history_limit` runs, delete the oldest
        runs while they are past `keep_until` and hold no live lease; raise the job's floor.

        Called only when the job's oldest run could go (the claim's SELECT tells, for one index
        seek), so a job whose oldest run is still kept pays nothing more; the runs are then
        counted, up to a bound."""
        count = conn.execute(
            sql.COUNT_RUNS, (self.prefix, job, self.history_limit + SWEEP_MAX_ROWS)
        ).fetchone()[0]
        excess = min(int(count) - self.history_limit, SWEEP_MAX_ROWS)
        if excess <= 0:
            return
        last = None
        for row in conn.execute(sql.OLDEST_RUNS, (self.prefix, job, excess)).fetchall():
            if not _forgettable(row, now):
                break
            last = row[0]
        if last is not None:
            conn.execute(sql.DELETE_UP_TO, (self.prefix, job, last))
            conn.execute(sql.RAISE_FLOOR, (self.prefix, job, last))

    # -- the lease holder's writes (L7-L9): one UPDATE each, token and status compared -------
    def renew(
        self, conn: sqlite3.Connection, job: str, slot: int, token: str, lease_ms: int
    ) -> bool:
        return self._update(conn, "lease_until = ?", (self.clock() + lease_ms,), job, slot, token)

    def finish(
        self,
        conn: sqlite3.Connection,
        job: str,
        slot: int,
        token: str,
        status: RunStatus,
        error: str | None,
    ) -> bool:
        """L8, then C2 for finish: when the UPDATE matches nothing, a resend of a finish that
        was written (its answer lost) finds the run finished with this token and status: True,
        nothing written. A finished row never changes again, so reading it after the UPDATE
        is as good as reading it in the same transaction, and the winning path stays one
        statement."""
        if self._update(
            conn,
            f"error = {APPEND_TRY}, status = ?, finished_at = ?",
            (error, status.value, self.clock()),
            job,
            slot,
            token,
        ):
            return True
        row = conn.execute(sql.SELECT_RUN, (self.prefix, job, slot)).fetchone()
        run = None if row is None else sql.run_from_row(row, job, self.path)
        # "write" here means the run was taken back by this token after the UPDATE missed:
        # the answer of the UPDATE's instant (fenced) stands.
        return decide_finish(run, token, status) == "again"

    def release(self, conn: sqlite3.Connection, job: str, slot: int, token: str) -> bool:
        return self._update(conn, "lease_until = ?", (self.clock() - 1,), job, slot, token)

    def retry(
        self, conn: sqlite3.Connection, job: str, slot: int, token: str, error: str, delay_ms: int
    ) -> bool:
        """L12, one UPDATE: append `error` to the try log (unless a resend finds it already
        last) and hold the run until now + `delay_ms`; the run stays running with `token`."""
        return self._update(
            conn,
            f"error = CASE WHEN substr(error, -length(?1)) = ?1 THEN error ELSE {APPEND_TRY} END, "
            "lease_until = ?",
            (error, self.clock() + delay_ms),
            job,
            slot,
            token,
        )

    def _update(
        self,
        conn: sqlite3.Connection,
        assignments: str,
        values: tuple[object, ...],
        job: str,
        slot: int,
        token: str,
    ) -> bool:
        cursor = conn.execute(
            f"UPDATE {RUNS} SET {assignments} WHERE prefix = ? AND job = ? AND slot = ? "
            "AND token = ? AND status = 'running'",
            (*values, self.prefix, job, slot, token),
        )
        return cursor.rowcount == 1

    def history(self, conn: sqlite3.Connection, job: str, limit: int) -> list[RunRecord]:
        """Newest slot first; rows that cannot be read are reported (`DamagedHistory`) with
        the others, each named by its slot as stored."""
        reader = HistoryReader(job)
        for row in conn.execute(sql.SELECT_HISTORY, (self.prefix, job, limit)).fetchall():
            reader.read(
                functools.partial(sql.run_from_row, row, job, self.path),
                key=f"slot {shown(row[0])}",
                slot=row[0],
            )
        return reader.result()

    def jobs(self, conn: sqlite3.Connection) -> list[str]:
        return [str(row[0]) for row in conn.execute(sql.SELECT_JOBS, (self.prefix,)).fetchall()]

    # -- control (P1, X1): each write its own BEGIN IMMEDIATE, as a claim -------------------
    def _write(self, conn: sqlite3.Connection, step: Callable[..., T], *args: object) -> T:
        conn.execute("BEGIN IMMEDIATE")
        try:
            result = step(conn, self.prefix, *args)
            conn.execute("COMMIT")
        except BaseException:
            _rollback(conn)
            raise
        return result

    def pause(
        self, conn: sqlite3.Connection, job: str, until_ms: int | None, reason: str, by: str
    ) -> Pause:
        now = self.clock()
        until = control.check_until(until_ms)
        return self._write(conn, control.pause, job, now, until, reason, by)

    def resume(self, conn: sqlite3.Connection, job: str) -> bool:
        return self._write(conn, control.resume, job, self.clock())

    def pauses(self, conn: sqlite3.Connection) -> list[Pause]:
        if not _has(conn, PAUSES):  # a file from before pauses, read read-only: none
            return []
        return control.list_pauses(conn, self.prefix, self.clock(), self.path)

    def trigger(self, conn: sqlite3.Connection, job: str, reason: str, by: str) -> Trigger:
        # The clock is read under the write lock: triggers of one job get distinct slots.
        return self._write(conn, lambda c, p: control.trigger(c, p, job, self.clock(), reason, by))

    def triggers(self, conn: sqlite3.Connection, since_ms: int) -> list[Trigger]:
        if not _has(conn, TRIGGERS):
            return []
        return control.list_triggers(conn, self.prefix, since_ms, self.path)


def _has(conn: sqlite3.Connection, table: str) -> bool:
    return table in existing_tables(conn)


def _values(run: RunRecord) -> tuple[object, ...]:
    return (
        run.slot,
        run.status.value,
        run.attempt,
        run.token,
        run.holder,
        run.claimed_at,
        run.lease_until,
        run.finished_at,
        run.error,
    )


def _forgettable(row: tuple[object, ...], now: int) -> bool:
    _, status, lease_until, keep = row
    live = status == RunStatus.RUNNING.value and isinstance(lease_until, int) and lease_until >= now
    return isinstance(keep, int) and keep < now and not live
