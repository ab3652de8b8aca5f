-- The claim functions as releases before the packed claim created them (anarchon-postgres at
-- commit 1ae3348): <table>_claim with 13 arguments and 8 result columns, <table>_claim_many with
-- arrays. Rendered for schema "anarchon_legacy", table "anarchon_runs"; tests/test_upgrade.py puts
-- them in a test schema to play an instance of that release during a rolling upgrade.
-- Statements are separated by a line holding only "-- next".

CREATE OR REPLACE FUNCTION "anarchon_legacy"."anarchon_runs_claim"(
    p_prefix text, p_job text, p_slot bigint, p_token text, p_holder text,
    p_lease_ms bigint, p_max_late_ms bigint, p_skip_overlap boolean, p_attempts integer,
    p_keep_until bigint, p_history_limit integer, p_lock_timeout_ms integer, p_now bigint,
    OUT o_outcome text, OUT o_attempt integer, OUT o_token text, OUT o_holder text,
    OUT o_lease_until bigint, OUT o_status text, OUT o_now bigint, OUT o_floor bigint)
LANGUAGE plpgsql VOLATILE AS $anarchon$
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
        FROM "anarchon_legacy"."anarchon_runs" x WHERE x.prefix = p_prefix AND x.job = p_job AND x.slot = p_slot;
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
            SELECT 1 FROM "anarchon_legacy"."anarchon_runs" x WHERE x.prefix = p_prefix AND x.job = p_job
                AND x.status = 'running' AND x.lease_until >= o_now AND x.slot <> p_slot
        ) THEN
            SELECT j.floor INTO o_floor FROM "anarchon_legacy"."anarchon_runs_jobs" j WHERE j.prefix = p_prefix AND j.job = p_job;
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
        SELECT j.floor INTO v_floor FROM "anarchon_legacy"."anarchon_runs_jobs" j
            WHERE j.prefix = p_prefix AND j.job = p_job FOR UPDATE;
        EXIT WHEN FOUND;
        INSERT INTO "anarchon_legacy"."anarchon_runs_jobs" (prefix, job) VALUES (p_prefix, p_job)
            ON CONFLICT (prefix, job) DO NOTHING;
        EXIT WHEN FOUND;  -- else another claim inserted it first: lock it on the next turn
    END LOOP;
    o_now := coalesce(p_now, floor(extract(epoch FROM clock_timestamp()) * 1000)::bigint);
    IF (v_floor IS NOT NULL AND p_slot <= v_floor) OR o_now - p_slot > p_max_late_ms THEN
        o_outcome := 'late';
    ELSIF p_skip_overlap AND EXISTS (
        SELECT 1 FROM "anarchon_legacy"."anarchon_runs" x WHERE x.prefix = p_prefix AND x.job = p_job
            AND x.status = 'running' AND x.lease_until >= o_now AND x.slot <> p_slot
    ) THEN
        o_outcome := 'overlap';
    ELSE
        -- Claimable if absent: insert unless the run exists (the usual win is one statement).
        INSERT INTO "anarchon_legacy"."anarchon_runs" (prefix, job, slot, status, attempt, token, holder, claimed_at,
                            lease_until, finished_at, error, keep_until)
            VALUES (p_prefix, p_job, p_slot, 'running', 1, p_token, p_holder, o_now,
                    o_now + p_lease_ms, NULL, NULL, p_keep_until)
            ON CONFLICT (prefix, job, slot) DO NOTHING;
        v_exists := NOT FOUND;
    END IF;
    IF o_outcome IS NOT NULL THEN  -- late or overlap, if the run is absent
        SELECT x.status, x.attempt, x.token, x.holder, x.lease_until INTO r
            FROM "anarchon_legacy"."anarchon_runs" x WHERE x.prefix = p_prefix AND x.job = p_job AND x.slot = p_slot
            FOR UPDATE;
        IF NOT FOUND THEN
            o_attempt := 0; o_floor := v_floor;
            RETURN;
        END IF;
        o_outcome := NULL;
    ELSIF v_exists THEN  -- the run exists: decide on it below
        SELECT x.status, x.attempt, x.token, x.holder, x.lease_until INTO r
            FROM "anarchon_legacy"."anarchon_runs" x WHERE x.prefix = p_prefix AND x.job = p_job AND x.slot = p_slot
            FOR UPDATE;
    ELSE
        o_outcome := 'won'; o_attempt := 1; o_token := p_token; o_holder := p_holder;
        o_lease_until := o_now + p_lease_ms; o_status := 'running';
        -- L11: only when the job's oldest run could go does retention cost more than one seek.
        SELECT x.slot, x.status, x.lease_until, x.keep_until INTO v_oldest
            FROM "anarchon_legacy"."anarchon_runs" x WHERE x.prefix = p_prefix AND x.job = p_job ORDER BY x.slot LIMIT 1;
        IF v_oldest.keep_until < o_now
           AND NOT (v_oldest.status = 'running' AND coalesce(v_oldest.lease_until >= o_now, false))
        THEN
            SELECT count(*) INTO v_count FROM (
                SELECT 1 FROM "anarchon_legacy"."anarchon_runs" x WHERE x.prefix = p_prefix AND x.job = p_job
                LIMIT p_history_limit + 100) c;
            v_excess := least(v_count - p_history_limit, 100);
            IF v_excess > 0 THEN
                FOR v_oldest IN
                    SELECT x.slot, x.status, x.lease_until, x.keep_until FROM "anarchon_legacy"."anarchon_runs" x
                    WHERE x.prefix = p_prefix AND x.job = p_job ORDER BY x.slot LIMIT v_excess
                LOOP
                    EXIT WHEN NOT (v_oldest.keep_until < o_now AND NOT (
                        v_oldest.status = 'running'
                        AND coalesce(v_oldest.lease_until >= o_now, false)));
                    v_last := v_oldest.slot;
                END LOOP;
                IF v_last IS NOT NULL THEN
                    DELETE FROM "anarchon_legacy"."anarchon_runs" x
                        WHERE x.prefix = p_prefix AND x.job = p_job AND x.slot <= v_last;
                    UPDATE "anarchon_legacy"."anarchon_runs_jobs" j SET floor = greatest(j.floor, v_last)
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
        UPDATE "anarchon_legacy"."anarchon_runs" x SET attempt = r.attempt + 1, token = p_token, holder = p_holder,
                claimed_at = o_now, lease_until = o_now + p_lease_ms
            WHERE x.prefix = p_prefix AND x.job = p_job AND x.slot = p_slot;
        o_outcome := 'won'; o_attempt := r.attempt + 1; o_token := p_token;
        o_holder := p_holder; o_lease_until := o_now + p_lease_ms;
    ELSE                                                               -- L5
        UPDATE "anarchon_legacy"."anarchon_runs" x SET status = 'interrupted', finished_at = o_now,
                error = format('lease of attempt %s ran out with no attempts left', r.attempt)
            WHERE x.prefix = p_prefix AND x.job = p_job AND x.slot = p_slot;
        o_outcome := 'interrupted'; o_status := 'interrupted';
    END IF;
    RETURN;
END
$anarchon$;
-- next
CREATE OR REPLACE FUNCTION "anarchon_legacy"."anarchon_runs_claim_many"(
    p_prefix text, p_jobs text[], p_slot bigint, p_tokens text[], p_holders text[],
    p_lease_ms bigint[], p_max_late_ms bigint[], p_skip_overlap boolean[], p_attempts integer[],
    p_keep_until bigint[], p_history_limit integer, p_lock_timeout_ms integer, p_now bigint)
RETURNS TABLE (o_n integer, o_outcome text, o_attempt integer, o_token text, o_holder text,
               o_lease_until bigint, o_status text, o_now bigint, o_floor bigint)
LANGUAGE plpgsql VOLATILE
SET plan_cache_mode = force_generic_plan
AS $anarchon$
DECLARE
    v_now bigint;
    v_n integer[];
    v_outcome text[];
    v_attempt integer[];
    v_token text[];
    v_holder text[];
    v_lease_until bigint[];
    v_status text[];
    v_floor bigint[];
    v_pending boolean[];
    v_lock text[];
    v_locked integer;
    v_won text[];
    v_job text;
    v_oldest record;
    v_count integer;
    v_excess integer;
    v_last bigint;
BEGIN
    -- Each statement reads the requests with one unnest of the arrays (never p_jobs[i]: a
    -- subscript of a text array walks it from its start); v_pending flags, in request order,
    -- the requests not answered yet. Every read of a table is a LATERAL ... LIMIT 1 probe of an
    -- index per request: the plans are generic (the arrays' sizes unknown), and such a probe
    -- cannot turn into a join that scans a table.
    v_now := coalesce(p_now, floor(extract(epoch FROM clock_timestamp()) * 1000)::bigint);

    -- 1. The read before the lock, for every request at once (the claim function's first step).
    SELECT array_agg(d.i) FILTER (WHERE d.outcome IS NOT NULL),
           array_agg(d.outcome) FILTER (WHERE d.outcome IS NOT NULL),
           array_agg(d.attempt) FILTER (WHERE d.outcome IS NOT NULL),
           array_agg(d.token) FILTER (WHERE d.outcome IS NOT NULL),
           array_agg(d.holder) FILTER (WHERE d.outcome IS NOT NULL),
           array_agg(d.lease_until) FILTER (WHERE d.outcome IS NOT NULL),
           array_agg(d.status) FILTER (WHERE d.outcome IS NOT NULL),
           array_agg(d.job_floor) FILTER (WHERE d.outcome IS NOT NULL),
           array_agg(d.outcome IS NULL ORDER BY d.i)
      INTO v_n, v_outcome, v_attempt, v_token, v_holder, v_lease_until, v_status, v_floor,
           v_pending
      FROM (
        SELECT q.i,
               CASE WHEN r.slot IS NOT NULL THEN
                        CASE WHEN r.status <> 'running' THEN 'done'
                             WHEN r.token = q.token THEN 'won'
                             WHEN r.lease_until >= v_now THEN 'running' END
                    WHEN v_now - p_slot > q.max_late THEN 'late'
                    WHEN o.overlap THEN
                        CASE WHEN p_slot <= f.job_floor THEN 'late' ELSE 'overlap' END
               END AS outcome,
               CASE WHEN r.slot IS NOT NULL THEN r.attempt ELSE 0 END AS attempt,
               r.token, r.holder, r.lease_until, r.status, f.job_floor
          FROM unnest(p_jobs, p_tokens, p_max_late_ms, p_skip_overlap) WITH ORDINALITY
               AS q(job, token, max_late, skip, i)
          LEFT JOIN LATERAL (  -- LIMIT 1: an index probe per request, never a join of tables
              SELECT x.slot, x.status, x.attempt, x.token, x.holder, x.lease_until FROM "anarchon_legacy"."anarchon_runs" x
               WHERE x.prefix = p_prefix AND x.job = q.job AND x.slot = p_slot LIMIT 1
          ) r ON true
          LEFT JOIN LATERAL (  -- overlap skip: another live run of the job
              SELECT true AS overlap FROM "anarchon_legacy"."anarchon_runs" y
               WHERE r.slot IS NULL AND v_now - p_slot <= q.max_late AND q.skip
                 AND y.prefix = p_prefix AND y.job = q.job AND y.status = 'running'
                 AND y.lease_until >= v_now AND y.slot <> p_slot
               LIMIT 1
          ) o ON true
          CROSS JOIN LATERAL (
              SELECT CASE WHEN o.overlap THEN (
                  SELECT j.floor FROM "anarchon_legacy"."anarchon_runs_jobs" j WHERE j.prefix = p_prefix AND j.job = q.job
              ) END AS job_floor
              OFFSET 0
          ) f
        OFFSET 0  -- a fence: each request is decided once, not once per aggregate below
      ) d;
    IF v_n IS NOT NULL THEN
        RETURN QUERY SELECT u.i::integer, u.outcome, u.attempt, u.token, u.holder, u.lease_until,
                            u.status, v_now, u.job_floor
            FROM unnest(v_n, v_outcome, v_attempt, v_token, v_holder, v_lease_until, v_status,
                        v_floor)
                 AS u(i, outcome, attempt, token, holder, lease_until, status, job_floor);
    END IF;
    IF NOT coalesce(true = ANY (v_pending), false) THEN  -- answered: no lock, no write
        RETURN;
    END IF;

    -- 2. The jobs' row locks, in one order ("C": as Python sorts), so batches never deadlock.
    -- A job row missing is inserted first, in the same order (an INSERT that meets another's
    -- uncommitted row waits for its end); then every row exists and is locked in turn.
    IF p_lock_timeout_ms > 0 THEN
        PERFORM set_config('lock_timeout', p_lock_timeout_ms::text || 'ms', true);
    END IF;
    SELECT array_agg(q.job ORDER BY q.job COLLATE "C") INTO v_lock
        FROM unnest(p_jobs, v_pending) AS q(job, pending) WHERE q.pending;
    v_locked := cardinality(v_lock);
    INSERT INTO "anarchon_legacy"."anarchon_runs_jobs" (prefix, job)
        SELECT p_prefix, l.job FROM unnest(v_lock) WITH ORDINALITY AS l(job, k) ORDER BY l.k
        ON CONFLICT (prefix, job) DO NOTHING;
    PERFORM 1 FROM unnest(v_lock) WITH ORDINALITY AS l(job, k)
        CROSS JOIN LATERAL (
            SELECT 1 FROM "anarchon_legacy"."anarchon_runs_jobs" j WHERE j.prefix = p_prefix AND j.job = l.job FOR UPDATE
        ) AS locked
        ORDER BY l.k;
    v_now := coalesce(p_now, floor(extract(epoch FROM clock_timestamp()) * 1000)::bigint);

    -- 3. Every claimable slot with no run: one INSERT (L1: floor, lateness, overlap). Under the
    -- job locks nobody else can insert these runs (every claim inserts a run under its job's
    -- lock), so this statement's snapshot is the truth: no ON CONFLICT (speculative insertion
    -- costs an index probe and a WAL record more per row). Were that ever wrong, the unique
    -- index would refuse the row and the whole batch be rolled back, then resent.
    WITH ins AS (
        INSERT INTO "anarchon_legacy"."anarchon_runs" (prefix, job, slot, status, attempt, token, holder, claimed_at,
                            lease_until, finished_at, error, keep_until)
        SELECT p_prefix, q.job, p_slot, 'running', 1, q.token, q.holder, v_now,
               v_now + q.lease_ms, NULL, NULL, q.keep_until
          FROM unnest(p_jobs, p_tokens, p_holders, p_lease_ms, p_max_late_ms, p_skip_overlap,
                      p_keep_until, v_pending)
               AS q(job, token, holder, lease_ms, max_late, skip, keep_until, pending)
          LEFT JOIN LATERAL (  -- the run exists
              SELECT true AS found FROM "anarchon_legacy"."anarchon_runs" x
               WHERE q.pending AND x.prefix = p_prefix AND x.job = q.job AND x.slot = p_slot
               LIMIT 1
          ) e ON true
          LEFT JOIN LATERAL (  -- the floor (L11)
              SELECT j.floor AS job_floor FROM "anarchon_legacy"."anarchon_runs_jobs" j
               WHERE q.pending AND j.prefix = p_prefix AND j.job = q.job
               LIMIT 1
          ) f ON true
          LEFT JOIN LATERAL (  -- overlap skip: another live run of the job
              SELECT true AS found FROM "anarchon_legacy"."anarchon_runs" y
               WHERE q.pending AND q.skip AND y.prefix = p_prefix AND y.job = q.job
                 AND y.status = 'running' AND y.lease_until >= v_now AND y.slot <> p_slot
               LIMIT 1
          ) o ON true
         WHERE q.pending AND e.found IS NULL AND o.found IS NULL
           AND v_now - p_slot <= q.max_late AND p_slot > coalesce(f.job_floor, -1)
        RETURNING job
    )
    SELECT array_agg(ins.job) INTO v_won FROM ins;
    IF cardinality(v_won) = v_locked THEN  -- the usual case: every pending request won
        RETURN QUERY SELECT q.i::integer, 'won'::text, 1, q.token, q.holder, v_now + q.lease_ms,
                            'running'::text, v_now, NULL::bigint
            FROM unnest(p_tokens, p_holders, p_lease_ms, v_pending) WITH ORDINALITY
                 AS q(token, holder, lease_ms, pending, i)
            WHERE q.pending;
        v_pending := NULL;
    END IF;

    -- 4. Every pending request's run now exists, or its slot is not claimable. A run with the
    -- caller's token is the one just inserted (won, attempt 1: the read before the lock answered
    -- resends); a run another claim wrote before our lock is L6 or L3, answered from the same
    -- read with no write. The rest (an expired lease: L4, L5; a late slot or an overlap under
    -- the lock) is decided by the claim function, which takes the lock already held here.
    IF v_pending IS NOT NULL THEN
        SELECT array_agg(d.i) FILTER (WHERE d.pending AND d.outcome IS NOT NULL),
               array_agg(d.outcome) FILTER (WHERE d.pending AND d.outcome IS NOT NULL),
               array_agg(d.attempt) FILTER (WHERE d.pending AND d.outcome IS NOT NULL),
               array_agg(d.token) FILTER (WHERE d.pending AND d.outcome IS NOT NULL),
               array_agg(d.holder) FILTER (WHERE d.pending AND d.outcome IS NOT NULL),
               array_agg(d.lease_until) FILTER (WHERE d.pending AND d.outcome IS NOT NULL),
               array_agg(d.status) FILTER (WHERE d.pending AND d.outcome IS NOT NULL),
               array_agg(d.pending AND d.outcome IS NULL ORDER BY d.i)
          INTO v_n, v_outcome, v_attempt, v_token, v_holder, v_lease_until, v_status, v_pending
          FROM (
            SELECT q.i, q.pending,
                   CASE WHEN r.status <> 'running' THEN 'done'
                        WHEN r.token = q.token THEN 'won'
                        WHEN r.lease_until >= v_now THEN 'running' END AS outcome,
                   r.attempt, r.token, r.holder, r.lease_until, r.status
              FROM unnest(p_jobs, p_tokens, v_pending) WITH ORDINALITY AS q(job, token, pending, i)
              LEFT JOIN LATERAL (
                  SELECT x.status, x.attempt, x.token, x.holder, x.lease_until FROM "anarchon_legacy"."anarchon_runs" x
                   WHERE q.pending AND x.prefix = p_prefix AND x.job = q.job AND x.slot = p_slot
                   LIMIT 1
              ) r ON true
            OFFSET 0
          ) d;
        IF v_n IS NOT NULL THEN
            RETURN QUERY SELECT u.i::integer, u.outcome, u.attempt, u.token, u.holder, u.lease_until,
                                u.status, v_now, NULL::bigint
                FROM unnest(v_n, v_outcome, v_attempt, v_token, v_holder, v_lease_until, v_status)
                     AS u(i, outcome, attempt, token, holder, lease_until, status);
        END IF;
        IF true = ANY (v_pending) THEN
            RETURN QUERY SELECT q.i::integer, c.*
                FROM unnest(p_jobs, p_tokens, p_holders, p_lease_ms, p_max_late_ms, p_skip_overlap,
                            p_attempts, p_keep_until, v_pending) WITH ORDINALITY
                     AS q(job, token, holder, lease_ms, max_late, skip, attempts, keep_until,
                          pending, i)
                CROSS JOIN LATERAL "anarchon_legacy"."anarchon_runs_claim"(p_prefix, q.job, p_slot, q.token, q.holder, q.lease_ms,
                    q.max_late, q.skip, q.attempts, q.keep_until, p_history_limit,
                    p_lock_timeout_ms, p_now) AS c
                WHERE q.pending;
        END IF;
    END IF;

    -- 5. Retention (L11) for the new runs, as the claim function does after each win: the cheap
    -- test (can the job's oldest run go?) for all at once, the bounded sweep only where it can.
    IF v_won IS NULL THEN
        RETURN;
    END IF;
    FOR v_job IN
        SELECT w.job FROM unnest(v_won) AS w(job)
        CROSS JOIN LATERAL (
            SELECT x.status, x.lease_until, x.keep_until FROM "anarchon_legacy"."anarchon_runs" x
             WHERE x.prefix = p_prefix AND x.job = w.job ORDER BY x.slot LIMIT 1) o
        WHERE o.keep_until < v_now
          AND NOT (o.status = 'running' AND coalesce(o.lease_until >= v_now, false))
    LOOP
        SELECT count(*) INTO v_count FROM (
            SELECT 1 FROM "anarchon_legacy"."anarchon_runs" x WHERE x.prefix = p_prefix AND x.job = v_job
            LIMIT p_history_limit + 100) c;
        v_excess := least(v_count - p_history_limit, 100);
        CONTINUE WHEN v_excess <= 0;
        v_last := NULL;
        FOR v_oldest IN
            SELECT x.slot, x.status, x.lease_until, x.keep_until FROM "anarchon_legacy"."anarchon_runs" x
            WHERE x.prefix = p_prefix AND x.job = v_job ORDER BY x.slot LIMIT v_excess
        LOOP
            EXIT WHEN NOT (v_oldest.keep_until < v_now AND NOT (
                v_oldest.status = 'running' AND coalesce(v_oldest.lease_until >= v_now, false)));
            v_last := v_oldest.slot;
        END LOOP;
        IF v_last IS NOT NULL THEN
            DELETE FROM "anarchon_legacy"."anarchon_runs" x WHERE x.prefix = p_prefix AND x.job = v_job AND x.slot <= v_last;
            UPDATE "anarchon_legacy"."anarchon_runs_jobs" j SET floor = greatest(j.floor, v_last)
                WHERE j.prefix = p_prefix AND j.job = v_job;
        END IF;
    END LOOP;
    RETURN;
END
$anarchon$;
