"""The statements the store sends, and reading their rows back into anarchon's values.

Nothing read from the server is trusted: a row with a value anarchon never writes (an unknown
status, a missing lease) is `StoreCorrupt` naming the table, the job and the slot.
"""

from __future__ import annotations

from typing import Any

import attrs
from psycopg import AsyncConnection, sql

from anarchon import Claim, ClaimRequest, RunRecord, RunStatus, StoreCorrupt
from anarchon.backend import claim_from_outcome

from ._names import Names
from ._plpgsql import append_try

__all__ = [
    "INLINE_CLOSE",
    "INLINE_QUOTE",
    "RUN_COLUMNS",
    "Statements",
    "claim_from_answer",
    "run_from_row",
]

Query = bytes | sql.SQL | sql.Composed
"""A statement as `psycopg` takes it: composed with quoted names, or rendered to bytes."""

RUN_COLUMNS = "slot, status, attempt, token, holder, claimed_at, lease_until, finished_at, error"
NOW = "coalesce(%s::bigint, floor(extract(epoch FROM clock_timestamp()) * 1000)::bigint)"
"""The server's clock in epoch ms (T1); the parameter is None except under a test clock."""
INLINE_QUOTE = "$q$"
"""The dollar quote around a claim request sent inline (`Statements.claim_inline`)."""
INLINE_CLOSE = INLINE_QUOTE + "::text, NULL)"
"""What follows a request sent inline: the end of its quote, and no skip reason."""
_KEY = "prefix = %s AND job = %s AND slot = %s"
_HELD = _KEY + " AND token = %s AND status = 'running'"
_APPEND_TRY = f"CASE WHEN %s::text IS NULL THEN error ELSE {append_try('error', '%s::text')} END"
"""L12: the try log (``error``) with an entry appended (its three parameters: the entry; NULL
leaves it unchanged), its last `MAX_TRY_LOG_CHARS` characters kept, as
`anarchon.backend.append_try` does."""


@attrs.frozen
class Statements:
    """Every statement of one store, composed once with its quoted names, then rendered once to
    bytes by `rendered` (psycopg would otherwise compose a `sql.Composed` again on every call,
    which costs a claim more client time than the server spends on it)."""

    claim: Query
    claim_inline: Query
    claim_slot: Query
    claim_many: Query
    add_jobs: Query
    renew: Query
    finish: Query
    finished: Query
    release: Query
    retry: Query
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
    def build(cls, names: Names, lock_timeout: str = "0") -> Statements:
        """The statements of a store on `names`; `lock_timeout` is the store's, as PostgreSQL
        shows the setting ("0": none)."""
        runs = names.runs
        # The lease holder's writes wait for the run's row lock at most the lock timeout, also
        # on a connection that lacks the store's settings (through PgBouncer): as the claim
        # functions do, the statement sets it for its own transaction when the connection does
        # not have it (a subquery without columns of the row is evaluated once, before the scan,
        # so before any row lock is waited for; OR stops at the first true).
        held = _HELD
        if lock_timeout != "0":
            held += (
                " AND (SELECT current_setting('lock_timeout') = {timeout}"
                " OR set_config('lock_timeout', {timeout}, true) IS NOT NULL)"
            )
        timeout = sql.Literal(lock_timeout)
        return cls(
            # One packed text and the skip reason in, one packed text out (see `_function`).
            claim=sql.SQL("SELECT {}(%b, %b)").format(names.claim),  # %b: typed text, no cast
            # The same call with the request inline, up to its closing quote: a statement
            # without parameters goes as one simple-protocol Query message instead of Parse,
            # Bind, Describe and Execute, which costs the server and the client less (a claim
            # lost about 12 us of 200 here). Dollar quoting needs no escapes and means the same
            # whatever standard_conforming_strings says. Only without a skip reason (the usual
            # claim): the statement ends with `INLINE_CLOSE`.
            claim_inline=sql.SQL("SELECT {}(" + INLINE_QUOTE).format(names.claim),
            # Many jobs of one slot (the scheduler's batch): the batch function, set-based, with
            # the requests packed into three texts and the distinct policies (see `_batch`).
            claim_slot=sql.SQL(
                "SELECT o_n, o_answer FROM {}(%s, %s, %s, %s, %s, %s::text[], %s::text[], "
                "%s::bigint[], %s::bigint[], %s::boolean[], %s::integer[], %s::bigint[], %s, %s, "
                "%s)"
            ).format(names.claim_many),
            # The rows of jobs never claimed, for the batch function (see `_batch`), in the order
            # of the array (sorted), in a transaction of their own.
            add_jobs=sql.SQL(
                "INSERT INTO {} (prefix, job) SELECT %s, u.job FROM unnest(%s::text[]) "
                "WITH ORDINALITY AS u(job, k) ORDER BY u.k ON CONFLICT (prefix, job) DO NOTHING"
            ).format(names.jobs),
            # Any other batch (several slots, or a job twice): the claim function per request,
            # in one statement, one transaction: the jobs' row locks are taken in the order of
            # the array, which the store sorts by job, so two batches never wait on each other
            # in a cycle.
            claim_many=sql.SQL(
                "SELECT r.n, {}(r.request, r.reason) FROM unnest(%s::text[], %s::text[]) "
                "WITH ORDINALITY AS r(request, reason, n)"
            ).format(names.claim),
            renew=sql.SQL("UPDATE {} SET lease_until = " + NOW + " + %s WHERE " + held).format(
                runs, timeout=timeout
            ),
            finish=sql.SQL(
                "UPDATE {} SET status = %s, finished_at = "
                + NOW
                + ", error = "
                + _APPEND_TRY
                + " WHERE "
                + held
            ).format(runs, timeout=timeout),
            # C2 for finish, when the UPDATE changed nothing: the run's status if it holds the
            # token (a resent finish that was recorded finds its own status), in a statement of
            # its own, so that it sees what a concurrent finish committed.
            finished=sql.SQL("SELECT status FROM {} WHERE " + _KEY + " AND token = %s").format(
                runs
            ),
            release=sql.SQL("UPDATE {} SET lease_until = " + NOW + " - 1 WHERE " + held).format(
                runs, timeout=timeout
            ),
            # L12: the try log grows by the entry (unless a resend finds it last already) and
            # the run waits until now + the delay, still running with the holder's token.
            retry=sql.SQL(
                "UPDATE {} SET error = CASE WHEN right(error, length(%s::text)) = %s::text "
                "THEN error ELSE "
                + _APPEND_TRY
                + " END, lease_until = "
                + NOW
                + " + %s WHERE "
                + held
            ).format(runs, timeout=timeout),
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


_STATUSES = frozenset(s.value for s in RunStatus)


def _corrupt(answer: object, where: str) -> StoreCorrupt:
    shown = repr(answer)
    if len(shown) > 200:
        shown = shown[:200] + "..."
    return StoreCorrupt(
        f"the claim function of {where} answered {shown}, which is not a claim answer; "
        "reopen the store (it checks the functions), or drop them to have them created again"
    )


def claim_from_answer(answer: object, request: ClaimRequest, where: str) -> Claim:
    """The `Claim` for one answer of the claim function (see `_plpgsql.ANSWER_FIELDS`), with
    memory://'s words; `where` names the table. An answer that is not one is `StoreCorrupt`."""
    if not isinstance(answer, str):
        raise _corrupt(answer, where)
    try:
        outcome, attempt, lease_until, status, now, floor, token, holder = answer.split(" ", 7)
        if outcome == "late":  # forgotten (L11): nothing written
            return claim_from_outcome(
                request,
                outcome,
                attempt=0,
                token="",
                holder="",
                lease_until=None,
                status="",
                now=int(now),
                floor=int(floor) if floor else None,
            )
        if not token:
            raise ValueError(token)
        reason = None
        if outcome == "skipped":  # the holder, a newline, the reason (printable: no newline)
            holder, newline, reason = holder.rpartition("\n")
            if not newline or status != "skipped":
                raise ValueError(outcome)
        elif outcome == "done" and status not in _STATUSES:
            raise StoreCorrupt(
                f"run of job {request.job!r} at slot {request.slot} in {where} has status "
                f"{status!r}, which anarchon never writes; remove or repair the row"
            )
        return claim_from_outcome(
            request,
            outcome,
            attempt=int(attempt),
            token=token,
            holder=holder,
            # A won or running answer always has a lease: int("") fails it.
            lease_until=int(lease_until) if lease_until or outcome in ("won", "running") else None,
            status=status,
            now=0,
            floor=None,
            reason=reason,
        )
    except ValueError:
        raise _corrupt(answer, where) from None
