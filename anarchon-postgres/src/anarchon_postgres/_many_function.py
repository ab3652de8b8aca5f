"""The batch claim: many distinct jobs of one slot (the scheduler's batch) in one function call.
Its text is ``_sql/claim_many.sql``; this module fills in its names, answers and reasons.

``<table>_claim_many(...)`` takes the claim function's steps, each once for the whole batch:

1. **One read before any lock** of every request's run, an index probe each: the answers of the
   runs that need no write (a skip record, finished, the caller's own, a live lease), as the
   claim function answers them. The same statement sorts the other requests, the pending ones,
   by job (byte order).
2. **The locks**: every pending job's row is locked ``FOR UPDATE`` in that order, which also reads
   its floor (L11); ``now`` is read after the locks. Ordered locks never wait in a cycle, and a
   single claim locks one row. A job never claimed before has no row to lock: the function then
   claims nothing for the pending requests and names those jobs; the store inserts their rows in
   a statement of their own (in the same order) and sends the batch again.
3. **One INSERT** of every claimable run the read found absent (floor, lateness, no pause (P1:
   one probe of its key per request), no skip reason, overlap), with no probe for the run: should another claim have written it between the read
   and the lock, the unique index refuses it and the INSERT is made again with the probe.
4. Unless every pending request won there, **one INSERT of the skip records** L1 decides (S1:
   late, the job's pause (P1), the skip reason, overlap naming the slot that holds the lease), then every pending
   request's run is read once more: one just written answers from that read (won, skipped), as
   does one another claim wrote between the read and the lock; what still needs a decision (an
   expired lease, a forgotten slot, an overlap whose lease ended meanwhile) goes to the claim
   function, on the lock already held, so no rule is written twice.
5. **Retention**: one index seek per job that may have a new run or skip record, the bounded
   sweep only where the oldest run may go.

The requests travel packed: the jobs and the tokens as space-separated texts, and per request
the number of its *policy* (holder, lease, lateness, overlap, attempts, keep-until), whose
distinct values are sent once each in small arrays: a batch of 10,000 requests is three texts.
Skip reasons (free text) are an array of one per request, or NULL when no request has one (the
usual batch). The answer is one row ``(0, 'now n n n ...')`` listing the requests that won a new
run (attempt 1, their own token, holder and lease from ``now``), and one row ``(n, answer)`` for
every other request, in the claim function's answer format: every request is in exactly one of
them. Or, when job rows were missing, the answers of the read and one row ``(-1, 'job job ...')``.
`_batch` packs the requests and reads the answers.
"""

from __future__ import annotations

from psycopg import sql

from ._names import Names
from ._plpgsql import (
    SWEEP_MAX_ROWS,
    late_reason,
    overlap_reason,
    pause_reason,
    paused,
    run_answer,
    source,
    sweep_job,
    sweeps_now,
)

__all__ = ["MANY_ARGUMENT_TYPES", "create_many_function"]

MANY_ARGUMENT_TYPES = (
    "text, bigint, text, text, text, text[], text[], bigint[], bigint[], boolean[], integer[], "
    "bigint[], integer, text, bigint"
)
"""The batch function's signature, for ``to_regprocedure``."""

_ANSWERS = {
    "answer_run": run_answer("r.", "q.token"),
    "late_reason": late_reason("v_now - p_slot", "p_max_late_ms[q.policy]"),
    "overlap_reason": overlap_reason("o.slot"),
    "pause_reason": pause_reason("z."),
    "paused": paused("z.", "p_prefix", "q.job", "v_now"),
}
"""The claim function's answers and reasons (see `_function`), for the requests this function
decides itself."""


def create_many_function(names: Names) -> sql.Composed:
    """``CREATE OR REPLACE FUNCTION`` for the batch claim (``_sql/claim_many.sql``; it calls
    the claim function, so that one is created first)."""
    text = source("claim_many.sql")
    text = text.replace("{sweep_job}", sweep_job("p_prefix", "v_one", "p_history_limit", 8))
    return sql.SQL(text).format(
        claim_many=names.claim_many,
        runs=names.runs,
        jobs=names.jobs,
        pauses=names.pauses,
        claim=names.claim,
        sweep=sql.Literal(SWEEP_MAX_ROWS),
        sweeps_now=sweeps_now("w.job", "p_slot", "p_history_limit"),
        **{name: sql.SQL(expression) for name, expression in _ANSWERS.items()},
    )
