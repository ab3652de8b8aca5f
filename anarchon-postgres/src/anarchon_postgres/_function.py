"""The claim as one server-side function, so a claim is one round trip (C1, L1-L6, L11).

``<table>_claim(...)`` runs inside the single statement that calls it:

1. **The read before the lock.** One plain read of the run (when there is none, the lateness
   check and, for overlap ``skip``, one index seek for another live run). A finished run, the
   caller's own run, a live lease, a late slot and an overlap are answered here: the transaction
   stays read-only, so it takes no row lock, gets no transaction id and needs no WAL flush.
   Losing costs a read.
2. **The lock.** Otherwise ``SELECT ... FOR UPDATE`` of the job's row in ``<table>_jobs``
   (which also returns the job's forgotten floor, L11), or, for a job never claimed, ``INSERT ...
   ON CONFLICT DO NOTHING`` of that row (a row inserted is locked by its inserter; when another
   claim inserted it first, the ``SELECT ... FOR UPDATE`` is tried again). PostgreSQL holds that
   row lock until the statement commits, so claims of one job take turns; the row itself is not
   rewritten (no new row version, no dead tuple per claim). ``now`` is read from
   ``clock_timestamp()`` *after* the lock (``now()`` is frozen at the transaction start, T1);
   every later statement takes a fresh snapshot (READ COMMITTED), so it sees what the previous
   claim of the job wrote. A claimable slot is then ``INSERT ... ON CONFLICT DO NOTHING``: the
   usual win is that one statement. Otherwise the run is read ``FOR UPDATE`` and decided as
   `anarchon._leases.decide_claim` does, in SQL: takeover, interrupted, or nothing.
3. **Retention (L11)**, on a new run only, bounded to `SWEEP_MAX_ROWS` deletions per claim.

It returns one row ``(outcome, attempt, token, holder, lease_until, status, now, floor)``;
outcome is one of won, running, done, interrupted (L5: done), late, overlap. ``p_now`` is NULL
except in tests that drive a manual clock.
"""

from __future__ import annotations

from psycopg import sql

from ._names import Names

__all__ = ["SWEEP_MAX_ROWS", "create_function"]

SWEEP_MAX_ROWS = 100
"""L11: one claim deletes at most this many forgotten runs, so its latency stays bounded."""

_BODY = """
DECLARE
    r record;
    v_exists boolean := false;
    v_floor bigint;
    v_oldest record;
    v_count integer;
    v_excess integer;
    v_last bigint;
BEGIN
    o_now := coalesce(p_now, floor(extract(epoch FROM clock_timestamp()) * 1000)::bigint);
    SELECT x.status, x.attempt, x.token, x.holder, x.lease_until INTO r
        FROM {runs} x WHERE x.prefix = p_prefix AND x.job = p_job AND x.slot = p_slot;
    IF FOUND THEN
        IF r.status <> 'running' OR r.token = p_token OR r.lease_until >= o_now THEN
            o_outcome := CASE WHEN r.status <> 'running' THEN 'done'
                              WHEN r.token = p_token THEN 'won' ELSE 'running' END;
            o_attempt := r.attempt; o_token := r.token; o_holder := r.holder;
            o_lease_until := r.lease_until; o_status := r.status;
            RETURN;
        END IF;
    ELSE
        -- The forgotten floor (L11) is read only before answering overlap, and under the lock.
        IF o_now - p_slot > p_max_late_ms THEN
            o_outcome := 'late'; o_attempt := 0;
            RETURN;
        END IF;
        IF p_skip_overlap AND EXISTS (
            SELECT 1 FROM {runs} x WHERE x.prefix = p_prefix AND x.job = p_job
                AND x.status = 'running' AND x.lease_until >= o_now AND x.slot <> p_slot
        ) THEN
            SELECT j.floor INTO o_floor FROM {jobs} j WHERE j.prefix = p_prefix AND j.job = p_job;
            o_outcome := CASE WHEN p_slot <= o_floor THEN 'late' ELSE 'overlap' END;
            o_attempt := 0;
            RETURN;
        END IF;
    END IF;

    IF p_lock_timeout_ms > 0 THEN
        PERFORM set_config('lock_timeout', p_lock_timeout_ms::text || 'ms', true);
    END IF;
    -- The job's row lock: FOR UPDATE on the row when it exists (no new row version, so the
    -- usual claim does not rewrite it); a new job's row is inserted, which locks it just as well.
    LOOP
        SELECT j.floor INTO v_floor FROM {jobs} j
            WHERE j.prefix = p_prefix AND j.job = p_job FOR UPDATE;
        EXIT WHEN FOUND;
        INSERT INTO {jobs} (prefix, job) VALUES (p_prefix, p_job)
            ON CONFLICT (prefix, job) DO NOTHING;
        EXIT WHEN FOUND;  -- else another claim inserted it first: lock it on the next turn
    END LOOP;
    o_now := coalesce(p_now, floor(extract(epoch FROM clock_timestamp()) * 1000)::bigint);
    IF (v_floor IS NOT NULL AND p_slot <= v_floor) OR o_now - p_slot > p_max_late_ms THEN
        o_outcome := 'late';
    ELSIF p_skip_overlap AND EXISTS (
        SELECT 1 FROM {runs} x WHERE x.prefix = p_prefix AND x.job = p_job
            AND x.status = 'running' AND x.lease_until >= o_now AND x.slot <> p_slot
    ) THEN
        o_outcome := 'overlap';
    ELSE
        -- Claimable if absent: insert unless the run exists (the usual win is one statement).
        INSERT INTO {runs} (prefix, job, slot, status, attempt, token, holder, claimed_at,
                            lease_until, finished_at, error, keep_until)
            VALUES (p_prefix, p_job, p_slot, 'running', 1, p_token, p_holder, o_now,
                    o_now + p_lease_ms, NULL, NULL, p_keep_until)
            ON CONFLICT (prefix, job, slot) DO NOTHING;
        v_exists := NOT FOUND;
    END IF;
    IF o_outcome IS NOT NULL THEN  -- late or overlap, if the run is absent
        SELECT x.status, x.attempt, x.token, x.holder, x.lease_until INTO r
            FROM {runs} x WHERE x.prefix = p_prefix AND x.job = p_job AND x.slot = p_slot
            FOR UPDATE;
        IF NOT FOUND THEN
            o_attempt := 0; o_floor := v_floor;
            RETURN;
        END IF;
        o_outcome := NULL;
    ELSIF v_exists THEN  -- the run exists: decide on it below
        SELECT x.status, x.attempt, x.token, x.holder, x.lease_until INTO r
            FROM {runs} x WHERE x.prefix = p_prefix AND x.job = p_job AND x.slot = p_slot
            FOR UPDATE;
    ELSE
        o_outcome := 'won'; o_attempt := 1; o_token := p_token; o_holder := p_holder;
        o_lease_until := o_now + p_lease_ms; o_status := 'running';
        -- L11: only when the job's oldest run could go does retention cost more than one seek.
        SELECT x.slot, x.status, x.lease_until, x.keep_until INTO v_oldest
            FROM {runs} x WHERE x.prefix = p_prefix AND x.job = p_job ORDER BY x.slot LIMIT 1;
        IF v_oldest.keep_until < o_now
           AND NOT (v_oldest.status = 'running' AND coalesce(v_oldest.lease_until >= o_now, false))
        THEN
            SELECT count(*) INTO v_count FROM (
                SELECT 1 FROM {runs} x WHERE x.prefix = p_prefix AND x.job = p_job
                LIMIT p_history_limit + {sweep}) c;
            v_excess := least(v_count - p_history_limit, {sweep});
            IF v_excess > 0 THEN
                FOR v_oldest IN
                    SELECT x.slot, x.status, x.lease_until, x.keep_until FROM {runs} x
                    WHERE x.prefix = p_prefix AND x.job = p_job ORDER BY x.slot LIMIT v_excess
                LOOP
                    EXIT WHEN NOT (v_oldest.keep_until < o_now AND NOT (
                        v_oldest.status = 'running'
                        AND coalesce(v_oldest.lease_until >= o_now, false)));
                    v_last := v_oldest.slot;
                END LOOP;
                IF v_last IS NOT NULL THEN
                    DELETE FROM {runs} x
                        WHERE x.prefix = p_prefix AND x.job = p_job AND x.slot <= v_last;
                    UPDATE {jobs} j SET floor = greatest(j.floor, v_last)
                        WHERE j.prefix = p_prefix AND j.job = p_job;
                END IF;
            END IF;
        END IF;
        RETURN;
    END IF;

    -- The run exists (locked FOR UPDATE): L2-L6.
    o_attempt := r.attempt; o_token := r.token; o_holder := r.holder;
    o_lease_until := r.lease_until; o_status := r.status;
    IF r.status <> 'running' THEN                                      -- L6
        o_outcome := 'done';
    ELSIF r.token = p_token THEN                                       -- L2
        o_outcome := 'won';
    ELSIF r.lease_until >= o_now THEN                                  -- L3
        o_outcome := 'running';
    ELSIF r.attempt < p_attempts THEN                                  -- L4
        UPDATE {runs} x SET attempt = r.attempt + 1, token = p_token, holder = p_holder,
                claimed_at = o_now, lease_until = o_now + p_lease_ms
            WHERE x.prefix = p_prefix AND x.job = p_job AND x.slot = p_slot;
        o_outcome := 'won'; o_attempt := r.attempt + 1; o_token := p_token;
        o_holder := p_holder; o_lease_until := o_now + p_lease_ms;
    ELSE                                                               -- L5
        UPDATE {runs} x SET status = 'interrupted', finished_at = o_now,
                error = format('lease of attempt %s ran out with no attempts left', r.attempt)
            WHERE x.prefix = p_prefix AND x.job = p_job AND x.slot = p_slot;
        o_outcome := 'interrupted'; o_status := 'interrupted';
    END IF;
    RETURN;
END
"""

_SIGNATURE = """
CREATE OR REPLACE FUNCTION {claim}(
    p_prefix text, p_job text, p_slot bigint, p_token text, p_holder text,
    p_lease_ms bigint, p_max_late_ms bigint, p_skip_overlap boolean, p_attempts integer,
    p_keep_until bigint, p_history_limit integer, p_lock_timeout_ms integer, p_now bigint,
    OUT o_outcome text, OUT o_attempt integer, OUT o_token text, OUT o_holder text,
    OUT o_lease_until bigint, OUT o_status text, OUT o_now bigint, OUT o_floor bigint)
LANGUAGE plpgsql VOLATILE AS {body}
"""

ARGUMENT_TYPES = (
    "text, text, bigint, text, text, bigint, bigint, boolean, integer, bigint, integer, integer, "
    "bigint"
)
"""The function's signature, for ``to_regprocedure``."""


def create_function(names: Names) -> sql.Composed:
    """``CREATE OR REPLACE FUNCTION`` for the claim, with every name quoted."""
    body = sql.SQL(_BODY).format(
        runs=names.runs, jobs=names.jobs, sweep=sql.Literal(SWEEP_MAX_ROWS)
    )
    # The body is a dollar-quoted string: identifiers are validated to [A-Za-z0-9_], so the
    # quote tag cannot occur inside it.
    quoted = sql.Composed([sql.SQL("$anarchon$"), body, sql.SQL("$anarchon$")])
    return sql.SQL(_SIGNATURE).format(claim=names.claim, body=quoted)
