"""Pause and trigger on PostgreSQL (rules P1 and X1): the statements, each one round trip, and
`PauseAndTrigger`, the store's calls (`PostgresStore` inherits them).

A pause is one row per job in ``<table>_pauses``, keyed (prefix, job), which both claim
functions probe in the statement that decides a new slot (see ``_sql/claim.sql``); a trigger is
one row per run asked for in ``<table>_triggers``. Every statement reads the server's clock
(``clock_timestamp()``, T1), or the test clock when the store has one.

A trigger's ad-hoc slot is the server's time, past the job's triggers at or after it, moved off
a whole second (X1); two triggers of one job in the same millisecond race for one slot, and the
loser's ``INSERT ... ON CONFLICT DO NOTHING`` answers no row and is sent again, reading the
winner's row. The same statement deletes the prefix's triggers older than `KEEP_TRIGGERS_MS`.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import Any

import attrs
from psycopg import sql

from anarchon import ConfigError, Pause, StoreCorrupt, StoreUnavailable, Trigger, check_name
from anarchon.backend import check_control_text as check_text
from anarchon.backend import check_until, shown

from ._names import Names
from ._options import PostgresOptions

__all__ = [
    "KEEP_TRIGGERS_MS",
    "TRIGGER_TRIES",
    "ControlStatements",
    "PauseAndTrigger",
    "check_text",
    "check_until",
]

KEEP_TRIGGERS_MS = 86_400_000
"""How long a trigger stays listed (X1: a day, as runs are kept forever, below a floor)."""
TRIGGER_TRIES = 20
"""Sends of a trigger that keeps losing its slot to concurrent triggers of the same job."""

_NOW = "coalesce(%(clock)s::bigint, floor(extract(epoch FROM clock_timestamp()) * 1000)::bigint)"
_PAUSE_COLUMNS = "job, since_ms, until_ms, reason, paused_by"
_TRIGGER_COLUMNS = "job, slot, requested_at, reason, requested_by"


@attrs.frozen
class ControlStatements:
    """The statements of pause and trigger for one store's tables (named parameters; ``clock``
    is the test clock or None)."""

    pause: sql.Composed
    resume: sql.Composed
    pauses: sql.Composed
    trigger: sql.Composed
    triggers: sql.Composed
    exist: sql.Composed

    @classmethod
    def build(cls, names: Names) -> ControlStatements:
        pauses, triggers = names.pauses, names.triggers
        return cls(
            pause=sql.SQL(
                "INSERT INTO {} AS p (prefix, " + _PAUSE_COLUMNS + ") "
                "SELECT %(prefix)s, %(job)s, n.now, %(until)s, %(reason)s, %(by)s "
                "FROM (SELECT " + _NOW + " AS now) n "
                "ON CONFLICT (prefix, job) DO UPDATE SET since_ms = excluded.since_ms, "
                "until_ms = excluded.until_ms, reason = excluded.reason, "
                "paused_by = excluded.paused_by "
                "RETURNING p.since_ms, p.until_ms"
            ).format(pauses),
            resume=sql.SQL(
                "DELETE FROM {} WHERE prefix = %(prefix)s AND job = %(job)s "
                "RETURNING until_ms IS NULL OR until_ms > " + _NOW
            ).format(pauses),
            pauses=sql.SQL(
                "SELECT " + _PAUSE_COLUMNS + " FROM {} WHERE prefix = %(prefix)s "
                "AND (until_ms IS NULL OR until_ms > " + _NOW + ') ORDER BY job COLLATE "C"'
            ).format(pauses),
            trigger=sql.SQL(
                "WITH n AS (SELECT " + _NOW + " AS now), "
                "gone AS (DELETE FROM {triggers} t USING n WHERE t.prefix = %(prefix)s "
                "AND t.requested_at < n.now - %(keep)s), "
                "s AS (SELECT n.now, greatest(n.now, (SELECT max(t.slot) + 1 FROM {triggers} t "
                "WHERE t.prefix = %(prefix)s AND t.job = %(job)s AND t.slot >= n.now)) AS slot "
                "FROM n) "
                "INSERT INTO {triggers} (prefix, " + _TRIGGER_COLUMNS + ") "
                "SELECT %(prefix)s, %(job)s, "
                "CASE WHEN mod(s.slot, 1000) = 0 THEN s.slot + 1 ELSE s.slot END, s.now, "
                "%(reason)s, %(by)s FROM s "
                "ON CONFLICT (prefix, job, slot) DO NOTHING RETURNING slot, requested_at"
            ).format(triggers=triggers),
            triggers=sql.SQL(
                "SELECT " + _TRIGGER_COLUMNS + " FROM {} WHERE prefix = %(prefix)s "
                'AND requested_at >= %(since)s ORDER BY requested_at, job COLLATE "C", slot'
            ).format(triggers),
            # Whether the control tables exist (a schema made before them has none).
            exist=sql.Composed(
                [
                    sql.SQL("SELECT to_regclass(%(pauses)s) IS NOT NULL"),
                    sql.SQL(" AND to_regclass(%(triggers)s) IS NOT NULL"),
                ]
            ),
        )


def read_pause(row: tuple[Any, ...], where: str) -> Pause:
    job, since_ms, until_ms, reason, by = row
    try:
        if isinstance(since_ms, int) and isinstance(reason, str) and isinstance(by, str):
            return Pause(job=job, since_ms=since_ms, until_ms=until_ms, reason=reason, by=by)
    except (ConfigError, TypeError, ValueError):
        pass
    raise _damaged(where, row)


def read_trigger(row: tuple[Any, ...], where: str) -> Trigger:
    job, slot, requested_at, reason, by = row
    try:
        if isinstance(reason, str) and isinstance(by, str) and isinstance(slot, int):
            return Trigger(job=job, slot=slot, requested_at=requested_at, reason=reason, by=by)
    except (ConfigError, TypeError, ValueError):
        pass
    raise _damaged(where, row)


def _damaged(where: str, row: tuple[Any, ...]) -> StoreCorrupt:
    return StoreCorrupt(
        f"a row of {where} holds values anarchon never writes ({', '.join(map(shown, row))}); "
        "delete the row"
    )


class PauseAndTrigger:
    """`SupportsPause` and `SupportsTrigger` for `PostgresStore` (which sets these attributes)."""

    names: Names
    options: PostgresOptions
    where: str
    _read_only: bool
    _control: ControlStatements
    _control_tables: bool
    _keeps_pauses: bool
    _fetchone: Callable[..., Awaitable[tuple[Any, ...]]]
    _fetchall: Callable[..., Awaitable[list[tuple[Any, ...]]]]

    def _now_param(self) -> int | None:
        raise NotImplementedError

    def _control_params(self, job: str, **more: object) -> dict[str, object]:
        return {"prefix": self.options.prefix, "job": job, "clock": self._now_param(), **more}

    def _writable(self, what: str) -> None:
        """Refuse a control write on a store opened read-only (R1: it changes nothing, even
        where the user could write)."""
        if self._read_only:
            raise ConfigError(
                f"PostgreSQL store {self.where} was opened read-only (open_read_only): it reads "
                f"pauses and triggers, and cannot {what}; open it with "
                "'await anarchon.connect(url)' to write"
            )

    async def pause(
        self, job: str, *, until_ms: int | None = None, reason: str = "", by: str = ""
    ) -> Pause:
        """`SupportsPause`: from its commit on, both claim functions record every new slot of
        `job` ``skipped: paused`` in the claim's statement (P1), until `resume` or `until_ms`
        (epoch ms, exclusive, by the server's clock)."""
        check_name(job)
        until = check_until(until_ms)
        check_text(reason, "reason")
        check_text(by, "by")
        self._writable("pause a job")
        if not self._keeps_pauses:
            raise ConfigError(
                f"cannot pause job {job!r} at {self.where}: the claim functions in schema "
                f"{self.names.schema} are older than pauses and this user does not own them, so "
                "claims would not see the pause; open the store once as their owner (a "
                "migration role, say) to upgrade them"
            )
        params = self._control_params(job, until=until, reason=reason, by=by)
        since_ms, stored_until = await self._fetchone(self._control.pause, params)
        return Pause(job=job, since_ms=since_ms, until_ms=stored_until, reason=reason, by=by)

    async def resume(self, job: str) -> bool:
        check_name(job)
        self._writable("resume a job")
        rows = await self._fetchall(self._control.resume, self._control_params(job))
        return any(bool(row[0]) for row in rows)

    async def _has_control_tables(self) -> bool:
        """Whether the pauses and triggers tables exist: always after `open`; read-only, a
        schema from before them may lack them (then looked for again on each call)."""
        if not self._control_tables:
            params = {
                "pauses": self.names.pauses.as_string(None),
                "triggers": self.names.triggers.as_string(None),
            }
            row = await self._fetchone(self._control.exist, params)
            self._control_tables = bool(row[0])
        return self._control_tables

    async def pauses(self) -> list[Pause]:
        """The pauses in force by the server's clock, by job; [] on a schema from before pauses
        opened read-only."""
        if not await self._has_control_tables():
            return []
        rows = await self._fetchall(self._control.pauses, self._control_params(""))
        where = f"table {self.names.shown(self.names.pauses_table)}"
        return [read_pause(row, where) for row in rows]

    async def trigger(self, job: str, *, reason: str = "", by: str = "") -> Trigger:
        """`SupportsTrigger` (X1): the ad-hoc slot is the server's clock, moved past the job's
        triggers at or after it and off a whole second; triggers are kept a day."""
        check_name(job)
        check_text(reason, "reason")
        check_text(by, "by")
        self._writable("trigger a run")
        params = self._control_params(job, reason=reason, by=by, keep=KEEP_TRIGGERS_MS)
        for _ in range(TRIGGER_TRIES):
            rows = await self._fetchall(self._control.trigger, params)
            if rows:
                slot, requested_at = rows[0]
                return Trigger(job=job, slot=slot, requested_at=requested_at, reason=reason, by=by)
        raise StoreUnavailable(
            f"PostgreSQL at {self.where}: trigger of job {job!r} lost its slot to concurrent "
            f"triggers of the job {TRIGGER_TRIES} times; try again"
        )

    async def triggers(self, since_ms: int) -> list[Trigger]:
        """Triggers asked for at or after `since_ms`, oldest first (kept a day)."""
        if isinstance(since_ms, bool) or not isinstance(since_ms, int):
            raise ConfigError(
                f"since_ms must be an int of epoch milliseconds, got {shown(since_ms)}"
            )
        if not await self._has_control_tables():
            return []
        params = self._control_params("", since=since_ms)
        rows = await self._fetchall(self._control.triggers, params)
        where = f"table {self.names.shown(self.names.triggers_table)}"
        return [read_trigger(row, where) for row in rows]
