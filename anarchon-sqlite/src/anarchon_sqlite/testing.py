"""Backdoors for tests and the conformance kit: read and age runs with plain SQL.

They open their own short-lived `sqlite3` connection and bypass `SQLiteStore` entirely, so a
test can check what the file really holds (an independent oracle) and expire a lease without
sleeping. ``path`` is the database file (``store.path``), ``prefix`` the store's prefix option.

* `raw_run(path, prefix, job, slot)`: the run as stored, or None.
* `force_expire(path, prefix, job, slot, now_ms=None)`: set the run's ``lease_until`` to
  ``now - 1`` (``now_ms`` defaults to the wall clock; pass the store's clock when it has one).
* `floor(path, prefix, job)`: the job's forgotten floor (the newest deleted slot, L11), or None.
* `keep_until(path, prefix, job, slot)`: when the run may be forgotten (L11), or None.
"""

from __future__ import annotations

import os
import sqlite3
import time

from anarchon import RunRecord, RunStatus

__all__ = ["floor", "force_expire", "keep_until", "raw_run"]

Path = str | os.PathLike[str]

_COLUMNS = "slot, status, attempt, token, holder, claimed_at, lease_until, finished_at, error"


def _connect(path: Path) -> sqlite3.Connection:
    if not os.path.exists(path):
        raise FileNotFoundError(f"no SQLite database at {os.fspath(path)}")
    return sqlite3.connect(path, isolation_level=None, timeout=30)


def raw_run(path: Path, prefix: str, job: str, slot: int) -> RunRecord | None:
    """The run (job, slot) as the file holds it, or None when there is none."""
    conn = _connect(path)
    try:
        row = conn.execute(
            f"SELECT {_COLUMNS} FROM anarchon_runs WHERE prefix = ? AND job = ? AND slot = ?",
            (prefix, job, slot),
        ).fetchone()
    finally:
        conn.close()
    if row is None:
        return None
    return RunRecord(
        job=job,
        slot=row[0],
        status=RunStatus(row[1]),
        attempt=row[2],
        token=row[3],
        holder=row[4],
        claimed_at=row[5],
        lease_until=row[6],
        finished_at=row[7],
        error=row[8],
    )


def force_expire(path: Path, prefix: str, job: str, slot: int, now_ms: int | None = None) -> None:
    """End the run's lease: ``lease_until = now - 1``. `KeyError` when there is no such run."""
    now = time.time_ns() // 1_000_000 if now_ms is None else now_ms
    conn = _connect(path)
    try:
        changed = conn.execute(
            "UPDATE anarchon_runs SET lease_until = ? WHERE prefix = ? AND job = ? AND slot = ?",
            (now - 1, prefix, job, slot),
        ).rowcount
    finally:
        conn.close()
    if changed != 1:
        raise KeyError(f"no run of job {job!r} at slot {slot} (prefix {prefix!r}) in {path}")


def floor(path: Path, prefix: str, job: str) -> int | None:
    """The newest slot deleted for `job` (L11); every slot at or below it is `late`."""
    conn = _connect(path)
    try:
        row = conn.execute(
            "SELECT floor FROM anarchon_jobs WHERE prefix = ? AND job = ?", (prefix, job)
        ).fetchone()
    finally:
        conn.close()
    return None if row is None else int(row[0])


def keep_until(path: Path, prefix: str, job: str, slot: int) -> int | None:
    """The instant after which the run may be deleted (L11), or None when there is no run."""
    conn = _connect(path)
    try:
        row = conn.execute(
            "SELECT keep_until FROM anarchon_runs WHERE prefix = ? AND job = ? AND slot = ?",
            (prefix, job, slot),
        ).fetchone()
    finally:
        conn.close()
    return None if row is None else int(row[0])
