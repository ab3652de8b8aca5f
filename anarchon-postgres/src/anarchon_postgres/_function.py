"""The claim as one server-side function, so a claim is one round trip (C1, S1, L1-L6, L11).
Its text is ``_sql/claim.sql``; this module fills in its names, answers and reasons.

``<table>_claim(request text, skip_reason text) RETURNS text`` runs inside the single statement
that calls it, ``SELECT <table>_claim($q$<request>$q$::text, NULL)``. The request and the answer
are each one text of space-separated fields (see `REQUEST_FIELDS` and `_plpgsql.ANSWER_FIELDS`):
every argument and every result column costs a call about as much as a read of a row does, so
the few of them are what make a claim barely dearer than ``SELECT 1``. The skip reason is the
one argument beside it (free text, NULL for a claim that means to run). The steps:

1. **The read before the lock.** One plain read of the run. A skip record (S1), a finished run,
   the caller's own run and a live lease are answered here (the query of the read builds the
   answer): the transaction stays read-only, so it takes no row lock, gets no transaction id and
   needs no WAL flush. Losing costs a read; so does a backup's check (L10), and so does every
   claim of a slot after the one that recorded its skip.
2. **The lock.** Otherwise ``SELECT ... FOR UPDATE`` of the job's row in ``<table>_jobs``
   (which also returns the job's forgotten floor, L11), or, for a job never claimed, ``INSERT ...
   ON CONFLICT DO NOTHING`` of that row (a row inserted is locked by its inserter; when another
   claim inserted it first, the ``SELECT ... FOR UPDATE`` is tried again). PostgreSQL holds that
   row lock until the statement commits, so claims of one job take turns; the row itself is not
   rewritten (no new row version, no dead tuple per claim). ``now`` is read from
   ``clock_timestamp()`` *after* the lock (``now()`` is frozen at the transaction start, T1);
   every later statement takes a fresh snapshot (READ COMMITTED), so it sees what the previous
   claim of the job wrote. A claimable slot (above the floor, not late, no skip reason) is then
   ``INSERT ... ON CONFLICT DO NOTHING``, whose condition is also the overlap check: the usual
   win is that one statement. Otherwise the run is read ``FOR UPDATE``: present, it is decided as
   `anarchon.backend.decide_claim` does, in SQL: takeover, interrupted, or nothing; absent, L1
   decides in its order: forgotten (``late``, nothing written), late, the job's pause (P1: the
   INSERT's condition probes the pause's key, and a skip reads the pause's reason), the skip
   reason, overlap (one more seek names the slot holding the lease), each a skip record written
   here.
3. **Retention (L11)**, after a new run or skip record only, bounded to `SWEEP_MAX_ROWS`
   deletions per claim.

The answer's outcome is one of won, running, done, interrupted (L5: done), late (forgotten),
skipped. The request's ``now`` is empty except in tests that drive a manual clock.

Earlier releases created ``<table>_claim`` with 13 arguments, then ``<table>_claim(text)`` (the
packed request, which answered late and overlap without writing). A changed signature is another
function: opening creates this one next to them and leaves them in place, so instances of the
older releases keep claiming during a rolling upgrade (all take the same row lock and write the
same rows; see the docs for what they make of a skip record).
"""

from __future__ import annotations

from psycopg import sql

from ._names import Names
from ._plpgsql import (
    SWEEP_MAX_ROWS,
    answer,
    append_try,
    late_reason,
    overlap_reason,
    pause_reason,
    paused,
    run_answer,
    source,
    sweep_job,
    sweeps_now,
)

__all__ = ["ARGUMENT_TYPES", "REQUEST_FIELDS", "create_function"]

REQUEST_FIELDS = (
    "prefix",
    "job",
    "slot",
    "token",
    "max_late_ms",
    "skip_overlap",  # 1 or 0
    "now",  # empty: the server's clock
    "lease_ms",
    "attempts",
    "keep_until",
    "history_limit",
    "lock_timeout",  # as PostgreSQL shows the setting (see `lock_timeout_setting`); 0: none
    "holder",  # last: the instance id may hold spaces
)
"""The request, in order, separated by single spaces. What the read before the lock needs comes
first; only the names' and the token's charsets are known, so the free-form holder is last."""

ARGUMENT_TYPES = "text, text"
"""The function's signature, for ``to_regprocedure``."""


_ANSWERS = {
    "answer_read": run_answer("x.", "split_part(p, ' ', 4)"),
    # The run, read under the lock, answers without a write (S1, L6, L2, L3).
    "answer_run": answer(
        "CASE WHEN v_status = 'skipped' THEN 'skipped' WHEN v_status <> 'running' THEN 'done' "
        "WHEN v_token = a[4] THEN 'won' ELSE 'running' END",
        *("v_attempt", "v_lease_until", "v_status", "v_now", "NULL", "v_token", "v_run_holder"),
        reason="CASE WHEN v_status = 'skipped' THEN coalesce(v_error, '') END",
    ),
    "answer_late": answer("'late'", "0", "NULL", "NULL", "v_now", "v_floor", "NULL", "NULL"),
    "answer_won": answer(
        *("'won'", "1", "v_now + a[8]::bigint", "'running'", "v_now", "NULL", "a[4]", "v_holder")
    ),
    "answer_skipped": answer(
        *("'skipped'", "0", "NULL", "'skipped'", "v_now", "NULL", "a[4]", "v_holder"),
        reason="v_reason",
    ),
    "answer_takeover": answer(
        "'won'",
        "v_attempt + 1",
        "v_now + a[8]::bigint",
        "'running'",
        "v_now",
        "NULL",
        "a[4]",
        "v_holder",
    ),
    "answer_interrupted": answer(
        "'interrupted'",
        "v_attempt",
        "v_lease_until",
        "'interrupted'",
        "v_now",
        "NULL",
        "v_token",
        "v_run_holder",
    ),
    # L5's entry, appended to the try log of a retried run (L12), which stays.
    "interrupted_error": append_try(
        "v_error", "format('lease of attempt %s ran out with no attempts left', v_attempt)"
    ),
    "late_reason": late_reason("v_now - v_slot", "a[5]::bigint"),
    "overlap_reason": overlap_reason("x.slot"),
    "pause_reason": pause_reason("z."),
    "paused": paused("z.", "a[1]", "a[2]", "v_now"),
}


def create_function(names: Names) -> sql.Composed:
    """``CREATE OR REPLACE FUNCTION`` for the claim (``_sql/claim.sql``), with every name
    quoted."""
    text = source("claim.sql")
    text = text.replace("{sweep_job}", sweep_job("a[1]", "a[2]", "a[11]::integer", 12))
    return sql.SQL(text).format(
        claim=names.claim,
        runs=names.runs,
        jobs=names.jobs,
        pauses=names.pauses,
        sweep=sql.Literal(SWEEP_MAX_ROWS),
        sweeps_now=sweeps_now("a[2]", "v_slot", "a[11]::integer"),
        **{name: sql.SQL(expression) for name, expression in _ANSWERS.items()},
    )
