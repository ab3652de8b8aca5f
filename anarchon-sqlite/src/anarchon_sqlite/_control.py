"""Pause and trigger on a SQLite file (rules P1 and X1): the checks of the operator's input and
the steps on the worker thread.

A pause is one row per job in ``anarchon_pauses``, which the claim reads in its own ``BEGIN
IMMEDIATE`` transaction (see `_rows.SELECT_FOR_CLAIM`); a trigger is one row per run asked for
in ``anarchon_triggers``, its ad-hoc slot chosen under the same write lock, so two triggers of
one job never share a slot. Triggers are kept `KEEP_TRIGGERS_MS` after they were asked for:
runs are kept forever here (below a floor, L11), and X1 asks for a day then.
"""

from __future__ import annotations

import sqlite3
from typing import Any

from anarchon import ConfigError, Pause, StoreCorrupt, Trigger
from anarchon.backend import check_control_text as check_text
from anarchon.backend import check_until, next_trigger_slot, shown

from . import _rows as sql
from ._schema import PAUSES, TRIGGERS

__all__ = [
    "KEEP_TRIGGERS_MS",
    "check_text",
    "check_until",
    "list_pauses",
    "list_triggers",
    "next_trigger_slot",
    "pause",
    "resume",
    "trigger",
]

KEEP_TRIGGERS_MS = 86_400_000
"""How long a trigger stays listed (X1: a day, as runs are kept forever)."""


def pause(
    conn: sqlite3.Connection,
    prefix: str,
    job: str,
    now: int,
    until_ms: int | None,
    reason: str,
    by: str,
) -> Pause:
    """Write the pause of `job` (replacing one it has), committed before the answer."""
    conn.execute(sql.UPSERT_PAUSE, (prefix, job, now, until_ms, reason, by))
    return Pause(job=job, since_ms=now, until_ms=until_ms, reason=reason, by=by)


def resume(conn: sqlite3.Connection, prefix: str, job: str, now: int) -> bool:
    """Delete the pause of `job`; whether one was in force at `now`."""
    rows = conn.execute(sql.DELETE_PAUSE, (prefix, job)).fetchall()
    return any(row[0] is None or (isinstance(row[0], int) and row[0] > now) for row in rows)


def list_pauses(conn: sqlite3.Connection, prefix: str, now: int, where: str) -> list[Pause]:
    rows = conn.execute(sql.SELECT_PAUSES, (prefix, now)).fetchall()
    return [_read(Pause, PAUSES, row, where) for row in rows]


def trigger(
    conn: sqlite3.Connection, prefix: str, job: str, now: int, reason: str, by: str
) -> Trigger:
    """Write a trigger of `job` at its ad-hoc slot; forget those older than a day."""
    row = conn.execute(sql.LAST_TRIGGER_SLOT, (prefix, job, now)).fetchone()
    last = row[0] if row is not None and isinstance(row[0], int) else None
    slot = next_trigger_slot(now, last)
    conn.execute(sql.INSERT_TRIGGER, (prefix, job, slot, now, reason, by))
    conn.execute(sql.DELETE_TRIGGERS_BEFORE, (prefix, now - KEEP_TRIGGERS_MS))
    return Trigger(job=job, slot=slot, requested_at=now, reason=reason, by=by)


def list_triggers(
    conn: sqlite3.Connection, prefix: str, since_ms: int, where: str
) -> list[Trigger]:
    rows = conn.execute(sql.SELECT_TRIGGERS, (prefix, since_ms)).fetchall()
    return [_read(Trigger, TRIGGERS, row, where) for row in rows]


def _read(kind: Any, table: str, row: tuple[Any, ...], where: str) -> Any:
    """A row of `table` as a `Pause` or `Trigger`; one anarchon never writes is `StoreCorrupt`."""
    job, first, second, reason, by = row
    value: Pause | Trigger | None = None
    try:
        if kind is Pause:
            ok = isinstance(first, int) and (second is None or isinstance(second, int))
            value = Pause(job=job, since_ms=first, until_ms=second, reason=reason, by=by)
        else:
            ok = isinstance(first, int) and isinstance(second, int)
            value = Trigger(job=job, slot=first, requested_at=second, reason=reason, by=by)
        ok = ok and isinstance(reason, str) and isinstance(by, str)
    except (ConfigError, TypeError, ValueError):
        ok = False
    if not ok or value is None:
        raise StoreCorrupt(
            f"a row of table {table} in {where} (prefix and job {shown(job)}) holds values "
            f"anarchon never writes ({', '.join(shown(v) for v in row[1:])}); delete the row"
        )
    return value
