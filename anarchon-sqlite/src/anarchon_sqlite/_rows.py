"""Runs as rows: the statements the store issues, and reading a row back into a `RunRecord`.

Nothing read from the file is trusted: a row with a value anarchon never writes (an unknown
status, text where a number belongs) is `StoreCorrupt` naming the job and slot.
"""

from __future__ import annotations

from typing import Any

from anarchon import RunRecord
from anarchon.backend import PAUSED

from ._schema import JOBS, PAUSES, RUNS, TRIGGERS

__all__ = [
    "COUNT_RUNS",
    "DELETE_PAUSE",
    "DELETE_TRIGGERS_BEFORE",
    "DELETE_UP_TO",
    "INSERT_RUN",
    "INSERT_TRIGGER",
    "LAST_TRIGGER_SLOT",
    "OLDEST_RUNS",
    "OTHER_LIVE",
    "PAUSE_COLUMNS",
    "RAISE_FLOOR",
    "RUN_COLUMNS",
    "SELECT_FLOOR",
    "SELECT_FOR_CLAIM",
    "SELECT_HISTORY",
    "SELECT_JOBS",
    "SELECT_PAUSES",
    "SELECT_RUN",
    "SELECT_TRIGGERS",
    "TRIGGER_COLUMNS",
    "UPDATE_RUN",
    "UPSERT_PAUSE",
    "run_from_row",
]

RUN_COLUMNS = "slot, status, attempt, token, holder, claimed_at, lease_until, finished_at, error"

SELECT_RUN = f"SELECT {RUN_COLUMNS} FROM {RUNS} WHERE prefix = ? AND job = ? AND slot = ?"
SELECT_FLOOR = f"SELECT floor FROM {JOBS} WHERE prefix = ? AND job = ?"
SELECT_FOR_CLAIM = (
    "SELECT "
    + ", ".join(f"r.{c.strip()}" for c in RUN_COLUMNS.split(","))
    + f", (SELECT floor FROM {JOBS} WHERE prefix = ?1 AND job = ?2)"
    f", (SELECT keep_until < ?4 AND NOT (status = 'running' AND lease_until >= ?4) FROM {RUNS}"
    "    WHERE prefix = ?1 AND job = ?2 ORDER BY slot LIMIT 1)"
    f", (SELECT CASE WHEN reason = '' THEN '{PAUSED}' ELSE '{PAUSED}: ' || reason END"
    f"    FROM {PAUSES} WHERE prefix = ?1 AND job = ?2 AND (until_ms IS NULL OR until_ms > ?4))"
    f" FROM (SELECT 1) LEFT JOIN {RUNS} AS r ON r.prefix = ?1 AND r.job = ?2 AND r.slot = ?3"
)
"""Everything a claim reads, in one statement: the run (all NULL when there is none), the job's
floor (L11), whether the job's oldest run could be forgotten at ``now`` (?4), and the skip
reason of the job's pause in force at ``now`` (P1; NULL: not paused)."""
SELECT_HISTORY = (
    f"SELECT {RUN_COLUMNS} FROM {RUNS} WHERE prefix = ? AND job = ? ORDER BY slot DESC LIMIT ?"
)
SELECT_JOBS = (
    f"SELECT job FROM {RUNS} WHERE prefix = ?1 UNION SELECT job FROM {JOBS} WHERE prefix = ?1 "
    "ORDER BY job"
)
OTHER_LIVE = (
    f"SELECT slot FROM {RUNS} WHERE prefix = ? AND job = ? AND status = 'running' "
    "AND lease_until >= ? AND slot != ? LIMIT 1"
)
"""L1 overlap: a slot of the job, other than the claimed one, holding a live lease (any one)."""
INSERT_RUN = (
    f"INSERT INTO {RUNS} (prefix, job, {RUN_COLUMNS}, keep_until) "
    "VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)"
)
UPDATE_RUN = (
    f"UPDATE {RUNS} SET status = ?, attempt = ?, token = ?, holder = ?, claimed_at = ?, "
    "lease_until = ?, finished_at = ?, error = ? WHERE prefix = ? AND job = ? AND slot = ?"
)
COUNT_RUNS = f"SELECT count(*) FROM (SELECT 1 FROM {RUNS} WHERE prefix = ? AND job = ? LIMIT ?)"
"""A job's runs, counted up to the bound given as the third parameter."""
OLDEST_RUNS = (
    f"SELECT slot, status, lease_until, keep_until FROM {RUNS} WHERE prefix = ? AND job = ? "
    "ORDER BY slot LIMIT ?"
)
DELETE_UP_TO = f"DELETE FROM {RUNS} WHERE prefix = ? AND job = ? AND slot <= ?"
RAISE_FLOOR = (
    f"INSERT INTO {JOBS} (prefix, job, floor) VALUES (?, ?, ?) "
    "ON CONFLICT (prefix, job) DO UPDATE SET floor = max(floor, excluded.floor)"
)


PAUSE_COLUMNS = "job, since_ms, until_ms, reason, paused_by"
UPSERT_PAUSE = (
    f"INSERT INTO {PAUSES} (prefix, {PAUSE_COLUMNS}) VALUES (?, ?, ?, ?, ?, ?) "
    "ON CONFLICT (prefix, job) DO UPDATE SET since_ms = excluded.since_ms, "
    "until_ms = excluded.until_ms, reason = excluded.reason, paused_by = excluded.paused_by"
)
DELETE_PAUSE = f"DELETE FROM {PAUSES} WHERE prefix = ? AND job = ? RETURNING until_ms"
SELECT_PAUSES = (
    f"SELECT {PAUSE_COLUMNS} FROM {PAUSES} WHERE prefix = ?1 "
    "AND (until_ms IS NULL OR until_ms > ?2) ORDER BY job"
)
"""The pauses in force at ?2 (an ended one may stay in the table: it is inactive)."""
TRIGGER_COLUMNS = "job, slot, requested_at, reason, requested_by"
LAST_TRIGGER_SLOT = f"SELECT max(slot) FROM {TRIGGERS} WHERE prefix = ? AND job = ? AND slot >= ?"
INSERT_TRIGGER = f"INSERT INTO {TRIGGERS} (prefix, {TRIGGER_COLUMNS}) VALUES (?, ?, ?, ?, ?, ?)"
DELETE_TRIGGERS_BEFORE = f"DELETE FROM {TRIGGERS} WHERE prefix = ? AND requested_at < ?"
SELECT_TRIGGERS = (
    f"SELECT {TRIGGER_COLUMNS} FROM {TRIGGERS} WHERE prefix = ? AND requested_at >= ? "
    "ORDER BY requested_at, job, slot"
)


def run_from_row(row: tuple[Any, ...], job: str, where: str) -> RunRecord:
    """Read a row selected with `RUN_COLUMNS`; `where` names the file for the error message."""
    return RunRecord.from_row(row, job=job, where=where)
