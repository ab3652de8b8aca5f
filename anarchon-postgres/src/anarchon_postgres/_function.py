"""The claim as one server-side function, so a claim is one round trip (C1, S1, L1-L6, L11).

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
   `anarchon._leases.decide_claim` does, in SQL: takeover, interrupted, or nothing; absent, L1
   decides in its order: forgotten (``late``, nothing written), late, the skip reason, overlap
   (one more seek names the slot holding the lease), each a skip record written here.
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
    late_reason,
    overlap_reason,
    quoted_body,
    run_answer,
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


# Every statement of PL/pgSQL that reads a table is a query (a plan to check, locks to take, an
# executor to start), which costs a claim about as much as its server time for a row; an
# expression that reads none (an assignment, an IF) costs next to nothing. So the body spends
# queries only where it must: the usual loss is one query, the usual win four (the read, the
# lock, the INSERT, which is also the overlap check, the retention seek). A decided skip costs
# two or three more (the run read FOR UPDATE, the overlap seek naming the slot, the INSERT of the
# record), once per slot: later claims read the record before the lock. The request is split in
# the query of the read (split_part), and into an array only after it.
_BODY = """
DECLARE
    v_now bigint := coalesce(nullif(split_part(p, ' ', 7), '')::bigint,
                             floor(extract(epoch FROM clock_timestamp()) * 1000)::bigint);
    v_answer text;
BEGIN
    -- 1. The read before the lock: the answer of a run that needs no write, in the query.
    SELECT CASE WHEN x.status <> 'running' OR x.token = split_part(p, ' ', 4)
                     OR x.lease_until >= v_now THEN {answer_read} END
      INTO v_answer
      FROM {runs} x
     WHERE x.prefix = split_part(p, ' ', 1) AND x.job = split_part(p, ' ', 2)
       AND x.slot = split_part(p, ' ', 3)::bigint;
    IF v_answer IS NOT NULL THEN  -- a skip (S1), finished (L6), the caller's own (L2), live (L3)
        RETURN v_answer;
    END IF;
    -- The rest has its own block: the variables of a block are set up each time it is
    -- entered, and a loss never enters this one.
    DECLARE
        a text[];
        v_slot bigint;
        v_holder text;
        v_floor bigint;
        v_reason text;  -- the reason of the skip L1 decides (NULL: none)
        v_status text;  -- the run, read FOR UPDATE under the lock
        v_attempt integer;
        v_token text;
        v_run_holder text;
        v_lease_until bigint;
        v_error text;
        v_first_status text;  -- the job's oldest run (retention)
        v_first_lease_until bigint;
        v_first_keep_until bigint;
        v_oldest record;
        v_count integer;
        v_excess integer;
        v_last bigint;
        v_ignored text;
    BEGIN
        a := string_to_array(p, ' ');
        v_slot := a[3];

        -- 2. The lock, waiting at most the lock timeout: the connection's, when it has the store's
        -- (sent at connect), else set for this transaction (through PgBouncer, say, which does not
        -- pass the connection's settings on).
        IF a[12] <> '0' AND current_setting('lock_timeout') <> a[12] THEN
            v_ignored := set_config('lock_timeout', a[12], true);
        END IF;
        -- The job's row lock: FOR UPDATE on the row when it exists (no new row version, so the
        -- usual claim does not rewrite it); a new job's row is inserted, which locks it just as
        -- well.
        LOOP
            SELECT j.floor INTO v_floor FROM {jobs} j
                WHERE j.prefix = a[1] AND j.job = a[2] FOR UPDATE;
            EXIT WHEN FOUND;
            INSERT INTO {jobs} (prefix, job) VALUES (a[1], a[2])
                ON CONFLICT (prefix, job) DO NOTHING;
            EXIT WHEN FOUND;  -- else another claim inserted it first: lock it on the next turn
        END LOOP;
        v_now := coalesce(nullif(a[7], '')::bigint,
                          floor(extract(epoch FROM clock_timestamp()) * 1000)::bigint);
        v_holder := array_to_string(a[13:], ' ');

        -- 3. The decision, under the lock (T1: the clock read after it). A claimable slot is
        -- inserted if absent and, for overlap skip, no other run of the job holds a live lease:
        -- the usual win is this one statement.
        IF (v_floor IS NULL OR v_slot > v_floor) AND v_now - v_slot <= a[5]::bigint
           AND p_skip_reason IS NULL THEN
            INSERT INTO {runs} (prefix, job, slot, status, attempt, token, holder, claimed_at,
                                lease_until, finished_at, error, keep_until)
                SELECT a[1], a[2], v_slot, 'running', 1, a[4], v_holder, v_now,
                       v_now + a[8]::bigint, NULL, NULL, a[10]::bigint
                 WHERE a[6] <> '1' OR NOT EXISTS (
                       SELECT 1 FROM {runs} x WHERE x.prefix = a[1] AND x.job = a[2]
                          AND x.status = 'running' AND x.lease_until >= v_now AND x.slot <> v_slot)
                ON CONFLICT (prefix, job, slot) DO NOTHING;
            IF FOUND THEN
                v_answer := {answer_won};
            END IF;
        END IF;
        IF v_answer IS NULL THEN  -- not inserted: the run exists, or L1 decides otherwise
            SELECT x.status, x.attempt, x.token, x.holder, x.lease_until, x.error
              INTO v_status, v_attempt, v_token, v_run_holder, v_lease_until, v_error
              FROM {runs} x WHERE x.prefix = a[1] AND x.job = a[2] AND x.slot = v_slot
               FOR UPDATE;
            IF FOUND THEN  -- the run exists (locked FOR UPDATE): L2-L6
                IF v_status <> 'running' OR v_token = a[4] OR v_lease_until >= v_now THEN
                    RETURN {answer_run};                                      -- S1, L6, L2, L3
                ELSIF v_attempt < a[9]::integer THEN                                  -- L4
                    UPDATE {runs} x SET attempt = v_attempt + 1, token = a[4],
                            holder = v_holder, claimed_at = v_now,
                            lease_until = v_now + a[8]::bigint
                        WHERE x.prefix = a[1] AND x.job = a[2] AND x.slot = v_slot;
                    RETURN {answer_takeover};
                END IF;
                UPDATE {runs} x SET status = 'interrupted', finished_at = v_now,           -- L5
                        error = format('lease of attempt %s ran out with no attempts left',
                                       v_attempt)
                    WHERE x.prefix = a[1] AND x.job = a[2] AND x.slot = v_slot;
                RETURN {answer_interrupted};
            END IF;
            -- No run: L1, in its order.
            IF v_floor IS NOT NULL AND v_slot <= v_floor THEN
                RETURN {answer_late};  -- forgotten (L11): its run may have been; nothing written
            ELSIF v_now - v_slot > a[5]::bigint THEN
                v_reason := {late_reason};
            ELSIF p_skip_reason IS NOT NULL THEN
                v_reason := p_skip_reason;
            ELSIF a[6] = '1' THEN
                -- The INSERT found a live lease: name the slot that holds it. None (it finished
                -- or was released since): the slot is claimable after all.
                SELECT {overlap_reason} INTO v_reason
                  FROM {runs} x WHERE x.prefix = a[1] AND x.job = a[2]
                   AND x.status = 'running' AND x.lease_until >= v_now AND x.slot <> v_slot
                 LIMIT 1;
            END IF;
            -- Under the job's lock no other claim writes a run of the job: a plain INSERT.
            IF v_reason IS NULL THEN
                INSERT INTO {runs} (prefix, job, slot, status, attempt, token, holder,
                                    claimed_at, lease_until, finished_at, error, keep_until)
                    VALUES (a[1], a[2], v_slot, 'running', 1, a[4], v_holder, v_now,
                            v_now + a[8]::bigint, NULL, NULL, a[10]::bigint);
                v_answer := {answer_won};
            ELSE  -- S1: the skip record, attempt 0, the deciding claim's token and instance
                INSERT INTO {runs} (prefix, job, slot, status, attempt, token, holder,
                                    claimed_at, lease_until, finished_at, error, keep_until)
                    VALUES (a[1], a[2], v_slot, 'skipped', 0, a[4], v_holder, v_now, NULL,
                            v_now, v_reason, a[10]::bigint);
                v_answer := {answer_skipped};
            END IF;
        END IF;

        -- 4. Retention (L11), after a new run or skip record: only when the job's oldest run
        -- could go does it cost more than this one seek; and then counting the job's runs walks
        -- up to history_limit index entries, so only one claim in about history_limit / 16 (at
        -- most 64) counts and sweeps (up to {sweep} runs), picked by a hash of (job, slot): a
        -- job's history holds about history_limit / 16 runs beyond its limit, at a few
        -- microseconds a claim.
        SELECT x.status, x.lease_until, x.keep_until
          INTO v_first_status, v_first_lease_until, v_first_keep_until
          FROM {runs} x WHERE x.prefix = a[1] AND x.job = a[2] ORDER BY x.slot LIMIT 1;
        IF v_first_keep_until < v_now
           AND NOT (v_first_status = 'running' AND coalesce(v_first_lease_until >= v_now, false))
           AND {sweeps_now}
        THEN
{sweep_job}
        END IF;
        RETURN v_answer;
    END;
END
"""

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
    "late_reason": late_reason("v_now - v_slot", "a[5]::bigint"),
    "overlap_reason": overlap_reason("x.slot"),
}

_SIGNATURE = """
CREATE OR REPLACE FUNCTION {claim}(p text, p_skip_reason text) RETURNS text
LANGUAGE plpgsql VOLATILE AS {body}
"""


def create_function(names: Names) -> sql.Composed:
    """``CREATE OR REPLACE FUNCTION`` for the claim, with every name quoted."""
    answers = {name: sql.SQL(expression) for name, expression in _ANSWERS.items()}
    body = sql.SQL(
        _BODY.replace("{sweep_job}", sweep_job("a[1]", "a[2]", "a[11]::integer", 12))
    ).format(
        runs=names.runs,
        jobs=names.jobs,
        sweep=sql.Literal(SWEEP_MAX_ROWS),
        sweeps_now=sweeps_now("a[2]", "v_slot", "a[11]::integer"),
        **answers,
    )
    return sql.SQL(_SIGNATURE).format(claim=names.claim, body=quoted_body(body))
