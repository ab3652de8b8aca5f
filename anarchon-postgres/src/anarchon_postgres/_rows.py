"""The statements the store sends, and reading their rows back into anarchon's values.

Nothing read from the server is trusted: a row with a value anarchon never writes (an unknown
status, a missing lease) is `StoreCorrupt` naming the table, the job and the slot.
"""

from __future__ import annotations

from typing import Any

import attrs
from psycopg import AsyncConnection, sql

from anarchon import Claim, ClaimRequest, Outcome, RunRecord, RunStatus, StoreCorrupt
from anarchon._leases import late_reason

from ._names import Names

__all__ = ["RUN_COLUMNS", "Statements", "claim_from_row", "run_from_row"]

Query = bytes | sql.SQL | sql.Composed
"""A statement as `psycopg` takes it: composed with quoted names, or rendered to bytes."""

RUN_COLUMNS = "slot, status, attempt, token, holder, claimed_at, lease_until, finished_at, error"
NOW = "coalesce(%s::bigint, floor(extract(epoch FROM clock_timestamp()) * 1000)::bigint)"
"""The server's clock in epoch ms (T1); the parameter is None except under a test clock."""
_KEY = "prefix = %s AND job = %s AND slot = %s"
_HELD = _KEY + " AND token = %s AND status = 'running'"


@attrs.frozen
class Statements:
    """Every statement of one store, composed once with its quoted names, then rendered once to
    bytes by `rendered` (psycopg would otherwise compose a `sql.Composed` again on every call,
    which costs a claim more client time than the server spends on it)."""

    claim: Query
    claim_slot: Query
    claim_many: Query
    read: Query
    renew: Query
    finish: Query
    release: Query
    history: Query
    now: Query
    jobs: Query

    def rendered(self, conn: AsyncConnection[Any]) -> Statements:
        """The statements as bytes in `conn`'s encoding (the same for every connection of the
        store: one server, one connection string)."""
        return Statements(
            **{
                field.name: _as_bytes(getattr(self, field.name), conn)
                for field in attrs.fields(Statements)
            }
        )

    @classmethod
    def build(cls, names: Names) -> Statements:
        runs = names.runs
        args = sql.SQL(", ").join([sql.Placeholder()] * 13)
        many_args = sql.SQL(
            "%s, r.job, r.slot, r.token, r.holder, r.lease_ms, r.max_late_ms, r.skip, r.attempts, "
            "r.keep_until, %s, %s, %s"
        )
        return cls(
            claim=sql.SQL("SELECT * FROM {}({})").format(names.claim, args),
            # Many jobs of one slot (the scheduler's batch): the batch function, set-based; the
            # arrays are sent in binary (no text quoting of 10,000 values).
            claim_slot=sql.SQL(
                "SELECT * FROM {}(%s, %b::text[], %s, %b::text[], %b::text[], %b::bigint[], "
                "%b::bigint[], %b::boolean[], %b::integer[], %b::bigint[], %s, %s, %s)"
            ).format(names.claim_many),
            # Any other batch (several slots, or a job twice): the claim function per request,
            # in one statement, one transaction: the jobs' row locks are taken in the order of
            # the arrays, which the store sorts by job, so two batches never wait on each other
            # in a cycle.
            claim_many=sql.SQL(
                "SELECT r.n, c.* FROM unnest(%s::text[], %s::bigint[], %s::text[], %s::text[], "
                "%s::bigint[], %s::bigint[], %s::boolean[], %s::integer[], %s::bigint[]) "
                "WITH ORDINALITY AS r(job, slot, token, holder, lease_ms, max_late_ms, skip, "
                "attempts, keep_until, n) CROSS JOIN LATERAL {}({}) c"
            ).format(names.claim, many_args),
            read=sql.SQL(
                "SELECT "
                + NOW
                + ", "
                + ", ".join(f"r.{c.strip()}" for c in RUN_COLUMNS.split(","))
                + " FROM (SELECT 1) AS one LEFT JOIN {} AS r ON r.prefix = %s AND r.job = %s "
                "AND r.slot = %s"
            ).format(runs),
            renew=sql.SQL("UPDATE {} SET lease_until = " + NOW + " + %s WHERE " + _HELD).format(
                runs
            ),
            finish=sql.SQL(
                "UPDATE {} SET status = %s, finished_at = " + NOW + ", error = %s WHERE " + _HELD
            ).format(runs),
            release=sql.SQL("UPDATE {} SET lease_until = " + NOW + " - 1 WHERE " + _HELD).format(
                runs
            ),
            history=sql.SQL(
                "SELECT " + RUN_COLUMNS + " FROM {} WHERE prefix = %s AND job = %s "
                "ORDER BY slot DESC LIMIT %s"
            ).format(runs),
            now=sql.SQL("SELECT " + NOW),
            jobs=sql.SQL(
                "SELECT job FROM {} WHERE prefix = %s UNION SELECT job FROM {} WHERE prefix = %s "
                "ORDER BY job"
            ).format(runs, names.jobs),
        )


def _as_bytes(query: Query, conn: AsyncConnection[Any]) -> bytes:
    return query if isinstance(query, bytes) else query.as_bytes(conn)


def run_from_row(row: tuple[Any, ...], job: str, where: str) -> RunRecord:
    """Read a row selected with `RUN_COLUMNS`; `where` names the table for the error message."""
    return RunRecord.from_row(row, job=job, where=where)


def claim_from_row(row: tuple[Any, ...], request: ClaimRequest, where: str) -> Claim:
    """The `Claim` for one row of the claim function (see `_function`), with memory://'s words."""
    outcome, attempt, token, holder, lease_until, status, now, floor = row
    if outcome == "late":
        reason = late_reason(request, now, floor) or "late"
        return Claim(outcome=Outcome.LATE, reason=reason)
    if outcome == "overlap":
        return Claim(
            outcome=Outcome.OVERLAP,
            reason="another run of this job holds a live lease and overlap is 'skip'",
        )
    if outcome in ("won", "running"):
        return Claim(
            outcome=Outcome(outcome),
            attempt=attempt,
            token=token,
            holder=holder,
            lease_until=lease_until,
        )
    if outcome == "done":
        try:
            reason = f"run {RunStatus(status)}"
        except ValueError:
            raise StoreCorrupt(
                f"run of job {request.job!r} at slot {request.slot} in {where} has status "
                f"{status!r}, which anarchon never writes; remove or repair the row"
            ) from None
    elif outcome == "interrupted":
        reason = "run interrupted: the last attempt's lease ran out"
    else:
        raise StoreCorrupt(f"the claim function in {where} answered {outcome!r}; reopen the store")
    return Claim(
        outcome=Outcome.DONE,
        attempt=attempt,
        token=token,
        holder=holder,
        lease_until=lease_until,
        reason=reason,
    )
