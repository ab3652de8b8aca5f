"""Backdoors for tests: read and age runs with plain SQL, bypassing `PostgresStore` entirely.

Each opens its own short-lived psycopg connection to ``conninfo`` (a libpq URL *without*
anarchon's options), so a test can check what the server really holds (an independent oracle) and
expire a lease without sleeping. ``schema`` and ``table`` are the store's options.

* `raw_run(conninfo, schema, table, prefix, job, slot)`: the run as stored, or None.
* `force_expire(conninfo, schema, table, prefix, job, slot, now_ms=None)`: ``lease_until`` set to
  ``now - 1`` (``now_ms`` defaults to the server's clock; pass the test clock when there is one).
* `floor(conninfo, schema, table, prefix, job)`: the job's forgotten floor (L11), or None.
"""

from __future__ import annotations

import psycopg
from psycopg import sql

from anarchon import RunRecord, RunStatus

__all__ = ["drop", "floor", "force_expire", "raw_run"]

_COLUMNS = "slot, status, attempt, token, holder, claimed_at, lease_until, finished_at, error"
_NOW = "floor(extract(epoch FROM clock_timestamp()) * 1000)::bigint"


def _connect(conninfo: str) -> psycopg.Connection[tuple[object, ...]]:
    return psycopg.connect(conninfo, autocommit=True, prepare_threshold=None)


def raw_run(
    conninfo: str, schema: str, table: str, prefix: str, job: str, slot: int
) -> RunRecord | None:
    """The run (job, slot) as the server holds it, or None when there is none."""
    query = sql.SQL(
        "SELECT " + _COLUMNS + " FROM {} WHERE prefix = %s AND job = %s AND slot = %s"
    ).format(sql.Identifier(schema, table))
    with _connect(conninfo) as conn:
        row = conn.execute(query, (prefix, job, slot)).fetchone()
    if row is None:
        return None
    return RunRecord(
        job=job,
        slot=row[0],  # type: ignore[arg-type]
        status=RunStatus(row[1]),
        attempt=row[2],  # type: ignore[arg-type]
        token=row[3],  # type: ignore[arg-type]
        holder=row[4],  # type: ignore[arg-type]
        claimed_at=row[5],  # type: ignore[arg-type]
        lease_until=row[6],  # type: ignore[arg-type]
        finished_at=row[7],  # type: ignore[arg-type]
        error=row[8],  # type: ignore[arg-type]
    )


def force_expire(
    conninfo: str,
    schema: str,
    table: str,
    prefix: str,
    job: str,
    slot: int,
    now_ms: int | None = None,
) -> None:
    """End the run's lease: ``lease_until = now - 1``. `KeyError` when there is no such run."""
    query = sql.SQL(
        "UPDATE {} SET lease_until = coalesce(%s::bigint, " + _NOW + ") - 1 "
        "WHERE prefix = %s AND job = %s AND slot = %s"
    ).format(sql.Identifier(schema, table))
    with _connect(conninfo) as conn:
        changed = conn.execute(query, (now_ms, prefix, job, slot)).rowcount
    if changed != 1:
        raise KeyError(f"no run of job {job!r} at slot {slot} (prefix {prefix!r}) in {table}")


def floor(conninfo: str, schema: str, table: str, prefix: str, job: str) -> int | None:
    """The newest slot deleted for `job` (L11); every slot at or below it is `late`."""
    query = sql.SQL("SELECT floor FROM {} WHERE prefix = %s AND job = %s").format(
        sql.Identifier(schema, f"{table}_jobs")
    )
    with _connect(conninfo) as conn:
        row = conn.execute(query, (prefix, job)).fetchone()
    return None if row is None or row[0] is None else int(row[0])  # type: ignore[call-overload]


def drop(conninfo: str, schema: str) -> None:
    """Drop `schema` with everything in it (test cleanup)."""
    with _connect(conninfo) as conn:
        conn.execute(sql.SQL("DROP SCHEMA IF EXISTS {} CASCADE").format(sql.Identifier(schema)))
