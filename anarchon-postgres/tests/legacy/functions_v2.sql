-- The claim functions as the release before the ledger created them (anarchon-postgres at commit
-- cc51a4c, body version 2): <table>_claim(text), one packed request and answer, which answers
-- late and overlap without writing anything, and <table>_claim_many with 14 arguments. Rendered
-- for schema "anarchon_legacy", table "anarchon_runs"; tests/test_upgrade.py puts them in a test
-- schema to play an instance of that release during a rolling upgrade.
-- Statements are separated by a line holding only "-- next".

CREATE OR REPLACE FUNCTION "anarchon_legacy"."anarchon_runs_claim"(p text) RETURNS text
LANGUAGE plpgsql VOLATILE AS $anarchon$
DECLARE
    v_now bigint := coalesce(nullif(split_part(p, ' ', 7), '')::bigint,
                             floor(extract(epoch FROM clock_timestamp()) * 1000)::bigint);
    v_answer text;
BEGIN
    -- 1. The read before the lock: the answer of a run that needs no write, in the query.
    SELECT CASE WHEN x.status <> 'running' OR x.token = split_part(p, ' ', 4)
                     OR x.lease_until >= v_now THEN concat(CASE WHEN x.status <> 'running' THEN 'done' WHEN x.token = split_part(p, ' ', 4) THEN 'won' ELSE 'running' END, ' ', x.attempt, ' ', x.lease_until, ' ', x.status, ' ', v_now, ' ', NULL, ' ', x.token, ' ', x.holder) END
      INTO v_answer
      FROM "anarchon_legacy"."anarchon_runs" x
     WHERE x.prefix = split_part(p, ' ', 1) AND x.job = split_part(p, ' ', 2)
       AND x.slot = split_part(p, ' ', 3)::bigint;
    IF v_answer IS NOT NULL THEN  -- finished (L6), the caller's own (L2), a live lease (L3)
        RETURN v_answer;
    END IF;
    -- The rest has its own block: the variables of a block are set up each time it is
    -- entered, and a loss never enters this one.
    DECLARE
        a text[];
        v_slot bigint;
        v_holder text;
        v_outcome text;
        v_floor bigint;
        v_exists boolean := false;
        v_status text;  -- the run, read FOR UPDATE under the lock
        v_attempt integer;
        v_token text;
        v_run_holder text;
        v_lease_until bigint;
        v_first_status text;  -- the job's oldest run (retention)
        v_first_lease_until bigint;
        v_first_keep_until bigint;
        v_oldest record;
        v_count integer;
        v_excess integer;
        v_last bigint;
    BEGIN
        a := string_to_array(p, ' ');
        v_slot := a[3];
        IF NOT FOUND THEN
            -- No run. The forgotten floor (L11) is read only before answering overlap, and under
            -- the lock.
            IF v_now - v_slot > a[5]::bigint THEN
                RETURN concat('late', ' ', 0, ' ', NULL, ' ', NULL, ' ', v_now, ' ', NULL, ' ', NULL, ' ', NULL);
            END IF;
            -- (Nested IFs: an IF whose condition reads a table is a query even when the test
            -- before its AND is false.)
            IF a[6] = '1' THEN
                IF EXISTS (
                    SELECT 1 FROM "anarchon_legacy"."anarchon_runs" x WHERE x.prefix = a[1] AND x.job = a[2]
                        AND x.status = 'running' AND x.lease_until >= v_now AND x.slot <> v_slot
                ) THEN
                    SELECT j.floor INTO v_floor FROM "anarchon_legacy"."anarchon_runs_jobs" j
                     WHERE j.prefix = a[1] AND j.job = a[2];
                    RETURN concat(CASE WHEN v_slot <= v_floor THEN 'late' ELSE 'overlap' END, ' ', 0, ' ', NULL, ' ', NULL, ' ', v_now, ' ', v_floor, ' ', NULL, ' ', NULL);
                END IF;
            END IF;
        END IF;

        -- 2. The lock, waiting at most the lock timeout: the connection's, when it has the store's
        -- (sent at connect), else set for this transaction (through PgBouncer, say, which does not
        -- pass the connection's settings on).
        IF a[12] <> '0' AND current_setting('lock_timeout') <> a[12] THEN
            v_outcome := set_config('lock_timeout', a[12], true);
            v_outcome := NULL;
        END IF;
        -- The job's row lock: FOR UPDATE on the row when it exists (no new row version, so the
        -- usual claim does not rewrite it); a new job's row is inserted, which locks it just as
        -- well.
        LOOP
            SELECT j.floor INTO v_floor FROM "anarchon_legacy"."anarchon_runs_jobs" j
                WHERE j.prefix = a[1] AND j.job = a[2] FOR UPDATE;
            EXIT WHEN FOUND;
            INSERT INTO "anarchon_legacy"."anarchon_runs_jobs" (prefix, job) VALUES (a[1], a[2])
                ON CONFLICT (prefix, job) DO NOTHING;
            EXIT WHEN FOUND;  -- else another claim inserted it first: lock it on the next turn
        END LOOP;
        v_now := coalesce(nullif(a[7], '')::bigint,
                          floor(extract(epoch FROM clock_timestamp()) * 1000)::bigint);
        v_holder := array_to_string(a[13:], ' ');

        -- 3. The decision, under the lock (T1: the clock read after it).
        IF (v_floor IS NOT NULL AND v_slot <= v_floor) OR v_now - v_slot > a[5]::bigint THEN
            v_outcome := 'late';
        ELSE
            -- Claimable if absent and, for overlap skip, no other run of the job holds a live
            -- lease: the usual win is this one statement.
            INSERT INTO "anarchon_legacy"."anarchon_runs" (prefix, job, slot, status, attempt, token, holder, claimed_at,
                                lease_until, finished_at, error, keep_until)
                SELECT a[1], a[2], v_slot, 'running', 1, a[4], v_holder, v_now,
                       v_now + a[8]::bigint, NULL, NULL, a[10]::bigint
                 WHERE a[6] <> '1' OR NOT EXISTS (
                       SELECT 1 FROM "anarchon_legacy"."anarchon_runs" x WHERE x.prefix = a[1] AND x.job = a[2]
                          AND x.status = 'running' AND x.lease_until >= v_now AND x.slot <> v_slot)
                ON CONFLICT (prefix, job, slot) DO NOTHING;
            v_exists := NOT FOUND;  -- not inserted: the run exists, or an overlap
        END IF;
        IF v_outcome IS NOT NULL OR v_exists THEN  -- decide on the run (L2-L6) if it exists
            SELECT x.status, x.attempt, x.token, x.holder, x.lease_until
              INTO v_status, v_attempt, v_token, v_run_holder, v_lease_until
              FROM "anarchon_legacy"."anarchon_runs" x WHERE x.prefix = a[1] AND x.job = a[2] AND x.slot = v_slot
               FOR UPDATE;
            IF NOT FOUND THEN  -- late, or (not inserted, no run) an overlap
                v_outcome := coalesce(v_outcome, 'overlap');
                RETURN concat(v_outcome, ' ', 0, ' ', NULL, ' ', NULL, ' ', v_now, ' ', v_floor, ' ', NULL, ' ', NULL);
            END IF;
        ELSE
            -- 4. Retention (L11): only when the job's oldest run could go does it cost more than
            -- this one seek; and then counting the job's runs walks up to history_limit index
            -- entries, so only one claim in about history_limit / 16 (at most 64) counts and
            -- sweeps (up to 100 runs), picked by a hash of (job, slot): a job's history
            -- holds about history_limit / 16 runs beyond its limit, at a few microseconds a claim.
            SELECT x.status, x.lease_until, x.keep_until
              INTO v_first_status, v_first_lease_until, v_first_keep_until
              FROM "anarchon_legacy"."anarchon_runs" x WHERE x.prefix = a[1] AND x.job = a[2] ORDER BY x.slot LIMIT 1;
            IF v_first_keep_until < v_now
               AND NOT (v_first_status = 'running'
                        AND coalesce(v_first_lease_until >= v_now, false))
               AND mod((hashtext(a[2]) # hashint8(v_slot)) & 2147483647, greatest(1, least(64, a[11]::integer / 16))) = 0
            THEN
                SELECT count(*) INTO v_count FROM (
                    SELECT 1 FROM "anarchon_legacy"."anarchon_runs" x WHERE x.prefix = a[1] AND x.job = a[2] LIMIT a[11]::integer + 100) c;
                v_excess := least(v_count - a[11]::integer, 100);
                v_last := NULL;
                IF v_excess > 0 THEN
                    FOR v_oldest IN
                        SELECT x.slot, x.status, x.lease_until, x.keep_until FROM "anarchon_legacy"."anarchon_runs" x
                        WHERE x.prefix = a[1] AND x.job = a[2] ORDER BY x.slot LIMIT v_excess
                    LOOP
                        EXIT WHEN NOT (v_oldest.keep_until < v_now AND NOT (
                            v_oldest.status = 'running' AND coalesce(v_oldest.lease_until >= v_now, false)));
                        v_last := v_oldest.slot;
                    END LOOP;
                    IF v_last IS NOT NULL THEN
                        DELETE FROM "anarchon_legacy"."anarchon_runs" x WHERE x.prefix = a[1] AND x.job = a[2] AND x.slot <= v_last;
                        UPDATE "anarchon_legacy"."anarchon_runs_jobs" j SET floor = greatest(j.floor, v_last)
                            WHERE j.prefix = a[1] AND j.job = a[2];
                    END IF;
                END IF;
            END IF;
            RETURN concat('won', ' ', 1, ' ', v_now + a[8]::bigint, ' ', 'running', ' ', v_now, ' ', NULL, ' ', a[4], ' ', v_holder);
        END IF;

        -- The run exists (locked FOR UPDATE): L2-L6.
        IF v_status <> 'running' OR v_token = a[4] OR v_lease_until >= v_now THEN  -- L6, L2, L3
            RETURN concat(CASE WHEN v_status <> 'running' THEN 'done' WHEN v_token = a[4] THEN 'won' ELSE 'running' END, ' ', v_attempt, ' ', v_lease_until, ' ', v_status, ' ', v_now, ' ', NULL, ' ', v_token, ' ', v_run_holder);
        ELSIF v_attempt < a[9]::integer THEN                                      -- L4
            UPDATE "anarchon_legacy"."anarchon_runs" x SET attempt = v_attempt + 1, token = a[4], holder = v_holder,
                    claimed_at = v_now, lease_until = v_now + a[8]::bigint
                WHERE x.prefix = a[1] AND x.job = a[2] AND x.slot = v_slot;
            RETURN concat('won', ' ', v_attempt + 1, ' ', v_now + a[8]::bigint, ' ', 'running', ' ', v_now, ' ', NULL, ' ', a[4], ' ', v_holder);
        END IF;
        UPDATE "anarchon_legacy"."anarchon_runs" x SET status = 'interrupted', finished_at = v_now,               -- L5
                error = format('lease of attempt %s ran out with no attempts left', v_attempt)
            WHERE x.prefix = a[1] AND x.job = a[2] AND x.slot = v_slot;
        RETURN concat('interrupted', ' ', v_attempt, ' ', v_lease_until, ' ', 'interrupted', ' ', v_now, ' ', NULL, ' ', v_token, ' ', v_run_holder);
    END;
END
$anarchon$
-- next
COMMENT ON FUNCTION "anarchon_legacy"."anarchon_runs_claim"(text) IS 'anarchon-postgres claim function, body version 2'
-- next
CREATE OR REPLACE FUNCTION "anarchon_legacy"."anarchon_runs_claim_many"(
    p_prefix text, p_slot bigint, p_jobs text, p_tokens text, p_policies text,
    p_holders text[], p_lease_ms bigint[], p_max_late_ms bigint[], p_skip_overlap boolean[],
    p_attempts integer[], p_keep_until bigint[], p_history_limit integer,
    p_lock_timeout text, p_now bigint)
RETURNS TABLE (o_n integer, o_answer text)
LANGUAGE plpgsql VOLATILE
SET plan_cache_mode = force_generic_plan
AS $anarchon$
DECLARE
    v_jobs text[] := string_to_array(p_jobs, ' ');
    v_tokens text[] := string_to_array(p_tokens, ' ');
    v_policies integer[] := string_to_array(p_policies, ' ')::integer[];
    v_now bigint;
    v_n integer[];        -- the pending requests, sorted by job: ordinal, job, token, policy
    v_job text[];
    v_token text[];
    v_policy integer[];
    v_absent boolean[];   -- whether the read found no run of theirs
    v_floor bigint[];     -- their jobs' floors, read under the lock
    v_new text[];         -- their jobs without a job row yet
    v_answered integer[]; -- the requests answered by the read, and their answers
    v_answer text[];
    v_inserted bigint;
    v_one text;
    v_oldest record;
    v_count integer;
    v_excess integer;
    v_last bigint;
BEGIN
    IF cardinality(v_tokens) IS DISTINCT FROM cardinality(v_jobs)
       OR cardinality(v_policies) IS DISTINCT FROM cardinality(v_jobs)
       OR (SELECT min(x) < 1 OR max(x) > cardinality(p_holders) FROM unnest(v_policies) AS x)
       OR cardinality(p_lease_ms) IS DISTINCT FROM cardinality(p_holders)
       OR cardinality(p_max_late_ms) IS DISTINCT FROM cardinality(p_holders)
       OR cardinality(p_skip_overlap) IS DISTINCT FROM cardinality(p_holders)
       OR cardinality(p_attempts) IS DISTINCT FROM cardinality(p_holders)
       OR cardinality(p_keep_until) IS DISTINCT FROM cardinality(p_holders) THEN
        RAISE EXCEPTION 'anarchon: a malformed batch (% jobs, % tokens, % policy numbers)',
            cardinality(v_jobs), cardinality(v_tokens), cardinality(v_policies)
            USING ERRCODE = 'data_exception';
    END IF;
    -- Each statement reads the requests with one unnest of the arrays (never v_jobs[i]: a
    -- subscript of a text array walks it from its start; the policies' arrays are short).
    -- Every read of a table is a LATERAL ... LIMIT 1 probe of an index per request: the plans
    -- are generic (the arrays' sizes unknown), and such a probe cannot turn into a join that
    -- scans a table.
    v_now := coalesce(p_now, floor(extract(epoch FROM clock_timestamp()) * 1000)::bigint);

    -- 1. The read before the lock, for every request at once: the answers are returned, the
    -- pending requests kept in job order (one sort, which every aggregate below shares).
    SELECT array_agg(d.n) FILTER (WHERE d.answer IS NULL),
           array_agg(d.job) FILTER (WHERE d.answer IS NULL),
           array_agg(d.token) FILTER (WHERE d.answer IS NULL),
           array_agg(d.policy) FILTER (WHERE d.answer IS NULL),
           array_agg(d.absent) FILTER (WHERE d.answer IS NULL),
           array_agg(d.n) FILTER (WHERE d.answer IS NOT NULL),
           array_agg(d.answer) FILTER (WHERE d.answer IS NOT NULL)
      INTO v_n, v_job, v_token, v_policy, v_absent, v_answered, v_answer
      FROM (
        SELECT q.n, q.job, q.token, q.policy, r.slot IS NULL AS absent,
               CASE WHEN r.slot IS NOT NULL THEN
                        CASE WHEN r.status <> 'running' OR r.token = q.token
                                  OR r.lease_until >= v_now THEN concat(CASE WHEN r.status <> 'running' THEN 'done' WHEN r.token = q.token THEN 'won' ELSE 'running' END, ' ', r.attempt, ' ', r.lease_until, ' ', r.status, ' ', v_now, ' ', NULL, ' ', r.token, ' ', r.holder) END
                    WHEN v_now - p_slot > p_max_late_ms[q.policy] THEN concat('late', ' ', 0, ' ', NULL, ' ', NULL, ' ', v_now, ' ', NULL, ' ', NULL, ' ', NULL)
                    WHEN o.overlap THEN concat(CASE WHEN p_slot <= f.job_floor THEN 'late' ELSE 'overlap' END, ' ', 0, ' ', NULL, ' ', NULL, ' ', v_now, ' ', f.job_floor, ' ', NULL, ' ', NULL)
               END AS answer
          FROM unnest(v_jobs, v_tokens, v_policies) WITH ORDINALITY AS q(job, token, policy, n)
          LEFT JOIN LATERAL (  -- LIMIT 1: an index probe per request, never a join of tables
              SELECT x.slot, x.status, x.attempt, x.token, x.holder, x.lease_until FROM "anarchon_legacy"."anarchon_runs" x
               WHERE x.prefix = p_prefix AND x.job = q.job AND x.slot = p_slot LIMIT 1
          ) r ON true
          LEFT JOIN LATERAL (  -- overlap skip: another live run of the job
              SELECT true AS overlap FROM "anarchon_legacy"."anarchon_runs" y
               WHERE r.slot IS NULL AND v_now - p_slot <= p_max_late_ms[q.policy]
                 AND p_skip_overlap[q.policy]
                 AND y.prefix = p_prefix AND y.job = q.job AND y.status = 'running'
                 AND y.lease_until >= v_now AND y.slot <> p_slot
               LIMIT 1
          ) o ON true
          LEFT JOIN LATERAL (  -- the floor, for an overlap (L11: late if forgotten)
              SELECT j.floor AS job_floor FROM "anarchon_legacy"."anarchon_runs_jobs" j
               WHERE o.overlap AND j.prefix = p_prefix AND j.job = q.job
               LIMIT 1
          ) f ON true
         ORDER BY q.job COLLATE "C"
        OFFSET 0  -- a fence: each request is decided once, in this order, for every aggregate
      ) d;
    IF v_answered IS NOT NULL THEN
        RETURN QUERY SELECT u.n::integer, u.answer
            FROM unnest(v_answered, v_answer) AS u(n, answer);
    END IF;
    IF v_n IS NULL THEN  -- every request answered: no lock, no write
        RETURN;
    END IF;

    -- 2. The jobs' row locks, in job order (byte order: as Python sorts), so batches never
    -- deadlock, reading the floors under the lock. This transaction inserts no job row: were a
    -- job's row missing, inserting it while holding the others' locks could close a cycle with
    -- another batch. The missing ones are answered (-1, 'job job ...') instead, with nothing
    -- claimed for the pending requests: the store inserts those rows on their own, then sends
    -- the batch again (it only happens the first time a job is claimed).
    IF p_lock_timeout <> '0' AND current_setting('lock_timeout') <> p_lock_timeout THEN
        PERFORM set_config('lock_timeout', p_lock_timeout, true);  -- as the claim function does
    END IF;
    SELECT array_agg(f.floor), array_agg(f.job) FILTER (WHERE f.locked IS NULL)
      INTO v_floor, v_new
      FROM (
        SELECT l.k, l.job, locked.floor, locked.locked
          FROM unnest(v_job) WITH ORDINALITY AS l(job, k)
          LEFT JOIN LATERAL (
              SELECT j.floor, true AS locked FROM "anarchon_legacy"."anarchon_runs_jobs" j
               WHERE j.prefix = p_prefix AND j.job = l.job FOR UPDATE
          ) locked ON true
         ORDER BY l.k
        OFFSET 0
      ) f;
    IF v_new IS NOT NULL THEN
        RETURN QUERY SELECT -1, array_to_string(v_new, ' ');
        RETURN;
    END IF;
    v_now := coalesce(p_now, floor(extract(epoch FROM clock_timestamp()) * 1000)::bigint);

    -- 3. Every claimable slot the read found no run for: one INSERT (L1: floor, lateness,
    -- overlap). Under the job locks nobody else can insert these runs (every claim inserts a run
    -- under its job's lock), so only a claim that inserted one between the read and the lock can
    -- collide (as for every batch that read before the winning batch of the same jobs committed):
    -- the unique index then refuses it, and the INSERT is made again, checking each run first.
    -- Checking always would cost every win an index probe per request, and ON CONFLICT a probe
    -- and a WAL record more per row.
    BEGIN
        INSERT INTO "anarchon_legacy"."anarchon_runs" (prefix, job, slot, status, attempt, token, holder, claimed_at,
                                lease_until, finished_at, error, keep_until)
        SELECT p_prefix, q.job, p_slot, 'running', 1, q.token, p_holders[q.policy], v_now,
               v_now + p_lease_ms[q.policy], NULL, NULL, p_keep_until[q.policy]
          FROM unnest(v_job, v_token, v_policy, v_floor, v_absent)
               AS q(job, token, policy, job_floor, absent)
          LEFT JOIN LATERAL (  -- overlap skip: another live run of the job
              SELECT true AS found FROM "anarchon_legacy"."anarchon_runs" y
               WHERE p_skip_overlap[q.policy] AND y.prefix = p_prefix AND y.job = q.job
                 AND y.status = 'running' AND y.lease_until >= v_now AND y.slot <> p_slot
               LIMIT 1
          ) o ON true
         WHERE q.absent AND o.found IS NULL
           AND v_now - p_slot <= p_max_late_ms[q.policy] AND p_slot > coalesce(q.job_floor, -1);
        GET DIAGNOSTICS v_inserted = ROW_COUNT;
    EXCEPTION WHEN unique_violation THEN
        INSERT INTO "anarchon_legacy"."anarchon_runs" (prefix, job, slot, status, attempt, token, holder, claimed_at,
                                lease_until, finished_at, error, keep_until)
        SELECT p_prefix, q.job, p_slot, 'running', 1, q.token, p_holders[q.policy], v_now,
               v_now + p_lease_ms[q.policy], NULL, NULL, p_keep_until[q.policy]
          FROM unnest(v_job, v_token, v_policy, v_floor, v_absent)
               AS q(job, token, policy, job_floor, absent)
          LEFT JOIN LATERAL (  -- the run exists
              SELECT true AS found FROM "anarchon_legacy"."anarchon_runs" x
               WHERE x.prefix = p_prefix AND x.job = q.job AND x.slot = p_slot
               LIMIT 1
          ) e ON true
          LEFT JOIN LATERAL (  -- overlap skip: another live run of the job
              SELECT true AS found FROM "anarchon_legacy"."anarchon_runs" y
               WHERE p_skip_overlap[q.policy] AND y.prefix = p_prefix AND y.job = q.job
                 AND y.status = 'running' AND y.lease_until >= v_now AND y.slot <> p_slot
               LIMIT 1
          ) o ON true
         WHERE q.absent AND o.found IS NULL AND e.found IS NULL
           AND v_now - p_slot <= p_max_late_ms[q.policy] AND p_slot > coalesce(q.job_floor, -1);
        GET DIAGNOSTICS v_inserted = ROW_COUNT;
    END;
    IF v_inserted = cardinality(v_job) THEN  -- the usual case: every pending one won
        RETURN QUERY SELECT 0, v_now::text || ' ' || array_to_string(v_n, ' ');
    ELSE
        -- 4. Every pending request's run now exists, or its slot is not claimable. A run with
        -- the caller's token is the one just inserted (won, attempt 1); a run another claim
        -- wrote before our lock is L6 or L3, answered from this read with no write. The rest (an
        -- expired lease: L4, L5; a late slot or an overlap under the lock) is decided by the
        -- claim function, which takes the lock already held here.
        RETURN QUERY
        SELECT q.n::integer, CASE
                   WHEN r.status <> 'running' OR r.token = q.token OR r.lease_until >= v_now THEN
                       concat(CASE WHEN r.status <> 'running' THEN 'done' WHEN r.token = q.token THEN 'won' ELSE 'running' END, ' ', r.attempt, ' ', r.lease_until, ' ', r.status, ' ', v_now, ' ', NULL, ' ', r.token, ' ', r.holder)
                   ELSE "anarchon_legacy"."anarchon_runs_claim"(concat_ws(' ', p_prefix, q.job, p_slot, q.token,
                       p_max_late_ms[q.policy], CASE WHEN p_skip_overlap[q.policy] THEN 1 ELSE 0
                       END, coalesce(p_now::text, ''), p_lease_ms[q.policy], p_attempts[q.policy],
                       p_keep_until[q.policy], p_history_limit, p_lock_timeout,
                       p_holders[q.policy]))
               END
          FROM unnest(v_n, v_job, v_token, v_policy) AS q(n, job, token, policy)
          LEFT JOIN LATERAL (
              SELECT x.status, x.attempt, x.token, x.holder, x.lease_until FROM "anarchon_legacy"."anarchon_runs" x
               WHERE x.prefix = p_prefix AND x.job = q.job AND x.slot = p_slot
               LIMIT 1
          ) r ON true;
    END IF;

    -- 5. Retention (L11) after new runs, as the claim function does after each win: the cheap
    -- test (can the job's oldest run go?) for all at once, the bounded sweep only where it can,
    -- and, as there, only for the jobs whose (job, slot) hash picks this claim to sweep.
    -- (For every pending job: when not all of them won a new run, testing a few more is
    -- harmless, and cheaper than finding out which.)
    IF v_inserted = 0 THEN
        RETURN;
    END IF;
    FOR v_one IN
        SELECT w.job FROM unnest(v_job) AS w(job)
        CROSS JOIN LATERAL (
            SELECT x.status, x.lease_until, x.keep_until FROM "anarchon_legacy"."anarchon_runs" x
             WHERE x.prefix = p_prefix AND x.job = w.job ORDER BY x.slot LIMIT 1) o
        WHERE o.keep_until < v_now
          AND NOT (o.status = 'running' AND coalesce(o.lease_until >= v_now, false))
          AND mod((hashtext(w.job) # hashint8(p_slot)) & 2147483647, greatest(1, least(64, p_history_limit / 16))) = 0
    LOOP
        SELECT count(*) INTO v_count FROM (
            SELECT 1 FROM "anarchon_legacy"."anarchon_runs" x WHERE x.prefix = p_prefix AND x.job = v_one LIMIT p_history_limit + 100) c;
        v_excess := least(v_count - p_history_limit, 100);
        v_last := NULL;
        IF v_excess > 0 THEN
            FOR v_oldest IN
                SELECT x.slot, x.status, x.lease_until, x.keep_until FROM "anarchon_legacy"."anarchon_runs" x
                WHERE x.prefix = p_prefix AND x.job = v_one ORDER BY x.slot LIMIT v_excess
            LOOP
                EXIT WHEN NOT (v_oldest.keep_until < v_now AND NOT (
                    v_oldest.status = 'running' AND coalesce(v_oldest.lease_until >= v_now, false)));
                v_last := v_oldest.slot;
            END LOOP;
            IF v_last IS NOT NULL THEN
                DELETE FROM "anarchon_legacy"."anarchon_runs" x WHERE x.prefix = p_prefix AND x.job = v_one AND x.slot <= v_last;
                UPDATE "anarchon_legacy"."anarchon_runs_jobs" j SET floor = greatest(j.floor, v_last)
                    WHERE j.prefix = p_prefix AND j.job = v_one;
            END IF;
        END IF;
    END LOOP;
    RETURN;
END
$anarchon$
-- next
COMMENT ON FUNCTION "anarchon_legacy"."anarchon_runs_claim_many"(text, bigint, text, text, text, text[], bigint[], bigint[], boolean[], integer[], bigint[], integer, text, bigint) IS 'anarchon-postgres claim function, body version 2'
