-- The batch claim, <table>_claim_many(...): many distinct jobs of one slot in one call.
-- `_many_function` explains the packed request, the answer rows and the steps, and fills in the
-- placeholders before PostgreSQL gets this text:
--   {claim_many}, {claim}, {runs}, {jobs}, {pauses}
--                                           the quoted names (see `_names`)
--   {sweep}, {sweeps_now}, {sweep_job}      retention, as in `claim.sql`
--   {answer_run}, {late_reason}, {overlap_reason}, {pause_reason}
--                                           the claim function's answer and skip reasons
--                                           (`_many_function._ANSWERS`)
--   {paused}                                the condition on a row z of {pauses}: the pause
--                                           of the request's job, in force
-- The text from the blank line below to the end is the statement, to the byte: a changed
-- character is a changed body (bump `_code.FUNCTIONS_VERSION`; a test pins the digest).

CREATE OR REPLACE FUNCTION {claim_many}(
    p_prefix text, p_slot bigint, p_jobs text, p_tokens text, p_policies text,
    p_skip_reasons text[], p_holders text[], p_lease_ms bigint[], p_max_late_ms bigint[],
    p_skip_overlap boolean[], p_attempts integer[], p_keep_until bigint[],
    p_history_limit integer, p_lock_timeout text, p_now bigint)
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
    v_reason text[];      -- their skip reasons (NULL: none)
    v_absent boolean[];   -- whether the read found no run of theirs
    v_floor bigint[];     -- their jobs' floors, read under the lock
    v_new text[];         -- their jobs without a job row yet
    v_answered integer[]; -- the requests answered by the read, and their answers
    v_answer text[];
    v_inserted bigint;    -- new runs won (step 3)
    v_skipped bigint := 0;  -- skip records written (step 4)
    v_one text;
    v_oldest record;
    v_count integer;
    v_excess integer;
    v_last bigint;
BEGIN
    IF cardinality(v_tokens) IS DISTINCT FROM cardinality(v_jobs)
       OR cardinality(v_policies) IS DISTINCT FROM cardinality(v_jobs)
       OR (p_skip_reasons IS NOT NULL
           AND cardinality(p_skip_reasons) IS DISTINCT FROM cardinality(v_jobs))
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
    -- subscript of a text array walks it from its start; the policies' arrays are short; a
    -- NULL array of skip reasons unnests as NULLs). Every read of a table is a LATERAL ...
    -- LIMIT 1 probe of an index per request: the plans are generic (the arrays' sizes unknown),
    -- and such a probe cannot turn into a join that scans a table.
    v_now := coalesce(p_now, floor(extract(epoch FROM clock_timestamp()) * 1000)::bigint);

    -- 1. The read before the lock, for every request at once: the answers are returned, the
    -- pending requests kept in job order (one sort, which every aggregate below shares).
    SELECT array_agg(d.n) FILTER (WHERE d.answer IS NULL),
           array_agg(d.job) FILTER (WHERE d.answer IS NULL),
           array_agg(d.token) FILTER (WHERE d.answer IS NULL),
           array_agg(d.policy) FILTER (WHERE d.answer IS NULL),
           array_agg(d.reason) FILTER (WHERE d.answer IS NULL),
           array_agg(d.absent) FILTER (WHERE d.answer IS NULL),
           array_agg(d.n) FILTER (WHERE d.answer IS NOT NULL),
           array_agg(d.answer) FILTER (WHERE d.answer IS NOT NULL)
      INTO v_n, v_job, v_token, v_policy, v_reason, v_absent, v_answered, v_answer
      FROM (
        SELECT q.n, q.job, q.token, q.policy, q.reason, r.slot IS NULL AS absent,
               CASE WHEN r.status <> 'running' OR r.token = q.token
                         OR r.lease_until >= v_now THEN {answer_run} END AS answer
          FROM unnest(v_jobs, v_tokens, v_policies, p_skip_reasons)
               WITH ORDINALITY AS q(job, token, policy, reason, n)
          LEFT JOIN LATERAL (  -- LIMIT 1: an index probe per request, never a join of tables
              SELECT x.slot, x.status, x.attempt, x.token, x.holder, x.lease_until, x.error
                FROM {runs} x
               WHERE x.prefix = p_prefix AND x.job = q.job AND x.slot = p_slot LIMIT 1
          ) r ON true
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
              SELECT j.floor, true AS locked FROM {jobs} j
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

    -- 3. Every claimable slot the read found no run for: one INSERT (L1: floor, lateness, no
    -- pause (P1), no skip reason, overlap). Under the job locks nobody else can insert these runs (every claim
    -- inserts a run under its job's lock), so only a claim that inserted one between the read
    -- and the lock can collide (as for every batch that read before the winning batch of the
    -- same jobs committed): the unique index then refuses it, and the INSERT is made again,
    -- checking each run first. Checking always would cost every win an index probe per request,
    -- and ON CONFLICT a probe and a WAL record more per row.
    BEGIN
        INSERT INTO {runs} (prefix, job, slot, status, attempt, token, holder, claimed_at,
                                lease_until, finished_at, error, keep_until)
        SELECT p_prefix, q.job, p_slot, 'running', 1, q.token, p_holders[q.policy], v_now,
               v_now + p_lease_ms[q.policy], NULL, NULL, p_keep_until[q.policy]
          FROM unnest(v_job, v_token, v_policy, v_floor, v_absent, v_reason)
               AS q(job, token, policy, job_floor, absent, reason)
          LEFT JOIN LATERAL (  -- P1: the job's pause in force
              SELECT true AS found FROM {pauses} z WHERE {paused} LIMIT 1
          ) pz ON true
          LEFT JOIN LATERAL (  -- overlap skip: another live run of the job
              SELECT true AS found FROM {runs} y
               WHERE p_skip_overlap[q.policy] AND y.prefix = p_prefix AND y.job = q.job
                 AND y.status = 'running' AND y.lease_until >= v_now AND y.slot <> p_slot
               LIMIT 1
          ) o ON true
         WHERE q.absent AND q.reason IS NULL AND pz.found IS NULL AND o.found IS NULL
           AND v_now - p_slot <= p_max_late_ms[q.policy] AND p_slot > coalesce(q.job_floor, -1);
        GET DIAGNOSTICS v_inserted = ROW_COUNT;
    EXCEPTION WHEN unique_violation THEN
        INSERT INTO {runs} (prefix, job, slot, status, attempt, token, holder, claimed_at,
                                lease_until, finished_at, error, keep_until)
        SELECT p_prefix, q.job, p_slot, 'running', 1, q.token, p_holders[q.policy], v_now,
               v_now + p_lease_ms[q.policy], NULL, NULL, p_keep_until[q.policy]
          FROM unnest(v_job, v_token, v_policy, v_floor, v_absent, v_reason)
               AS q(job, token, policy, job_floor, absent, reason)
          LEFT JOIN LATERAL (  -- the run exists
              SELECT true AS found FROM {runs} x
               WHERE x.prefix = p_prefix AND x.job = q.job AND x.slot = p_slot
               LIMIT 1
          ) e ON true
          LEFT JOIN LATERAL (  -- P1: the job's pause in force
              SELECT true AS found FROM {pauses} z WHERE {paused} LIMIT 1
          ) pz ON true
          LEFT JOIN LATERAL (  -- overlap skip: another live run of the job
              SELECT true AS found FROM {runs} y
               WHERE p_skip_overlap[q.policy] AND y.prefix = p_prefix AND y.job = q.job
                 AND y.status = 'running' AND y.lease_until >= v_now AND y.slot <> p_slot
               LIMIT 1
          ) o ON true
         WHERE q.absent AND q.reason IS NULL AND pz.found IS NULL AND o.found IS NULL
           AND e.found IS NULL
           AND v_now - p_slot <= p_max_late_ms[q.policy] AND p_slot > coalesce(q.job_floor, -1);
        GET DIAGNOSTICS v_inserted = ROW_COUNT;
    END;
    IF v_inserted = cardinality(v_job) THEN  -- the usual case: every pending one won
        RETURN QUERY SELECT 0, v_now::text || ' ' || array_to_string(v_n, ' ');
    ELSE
        -- 4. The skip records L1 decides for the slots still without a run above the floor
        -- (S1), in its order: late, the job's pause (P1), the skip reason, overlap, naming a
        -- slot that holds a live lease. ON CONFLICT: a run written between the read and the
        -- lock stays.
        INSERT INTO {runs} (prefix, job, slot, status, attempt, token, holder, claimed_at,
                            lease_until, finished_at, error, keep_until)
        SELECT p_prefix, s.job, p_slot, 'skipped', 0, s.token, p_holders[s.policy], v_now, NULL,
               v_now, s.reason, p_keep_until[s.policy]
          FROM (
            SELECT q.job, q.token, q.policy,
                   CASE WHEN v_now - p_slot > p_max_late_ms[q.policy] THEN {late_reason}
                        WHEN pz.reason IS NOT NULL THEN pz.reason
                        WHEN q.reason IS NOT NULL THEN q.reason
                        WHEN o.slot IS NOT NULL THEN {overlap_reason} END AS reason
              FROM unnest(v_job, v_token, v_policy, v_floor, v_absent, v_reason)
                   AS q(job, token, policy, job_floor, absent, reason)
              LEFT JOIN LATERAL (  -- P1: the reason of the job's pause in force
                  SELECT {pause_reason} AS reason FROM {pauses} z WHERE {paused} LIMIT 1
              ) pz ON true
              LEFT JOIN LATERAL (  -- overlap skip: a slot of the job that holds a live lease
                  SELECT y.slot FROM {runs} y
                   WHERE v_now - p_slot <= p_max_late_ms[q.policy] AND q.reason IS NULL
                     AND pz.reason IS NULL
                     AND p_skip_overlap[q.policy]
                     AND y.prefix = p_prefix AND y.job = q.job AND y.status = 'running'
                     AND y.lease_until >= v_now AND y.slot <> p_slot
                   LIMIT 1
              ) o ON true
             WHERE q.absent AND p_slot > coalesce(q.job_floor, -1)
          ) s
         WHERE s.reason IS NOT NULL
        ON CONFLICT (prefix, job, slot) DO NOTHING;
        GET DIAGNOSTICS v_skipped = ROW_COUNT;
        -- Every pending request's run now exists, or its slot is not claimable. A run with the
        -- caller's token is the one just written (won, attempt 1, or its skip record); a run
        -- another claim wrote before our lock is S1, L6 or L3, answered from this read with no
        -- write. The rest (an expired lease: L4, L5; a forgotten slot; an overlap whose lease
        -- ended since) is decided by the claim function, which takes the lock already held here.
        RETURN QUERY
        SELECT q.n::integer, CASE
                   WHEN r.status <> 'running' OR r.token = q.token OR r.lease_until >= v_now THEN
                       {answer_run}
                   ELSE {claim}(concat_ws(' ', p_prefix, q.job, p_slot, q.token,
                       p_max_late_ms[q.policy], CASE WHEN p_skip_overlap[q.policy] THEN 1 ELSE 0
                       END, coalesce(p_now::text, ''), p_lease_ms[q.policy], p_attempts[q.policy],
                       p_keep_until[q.policy], p_history_limit, p_lock_timeout,
                       p_holders[q.policy]), q.reason)
               END
          FROM unnest(v_n, v_job, v_token, v_policy, v_reason) AS q(n, job, token, policy, reason)
          LEFT JOIN LATERAL (
              SELECT x.status, x.attempt, x.token, x.holder, x.lease_until, x.error FROM {runs} x
               WHERE x.prefix = p_prefix AND x.job = q.job AND x.slot = p_slot
               LIMIT 1
          ) r ON true;
    END IF;

    -- 5. Retention (L11) after new runs and skip records, as the claim function does after
    -- each: the cheap test (can the job's oldest run go?) for all at once, the bounded sweep
    -- only where it can, and, as there, only for the jobs whose (job, slot) hash picks this
    -- claim to sweep. (For every pending job: when not all of them wrote a new run, testing a
    -- few more is harmless, and cheaper than finding out which.)
    IF v_inserted + v_skipped = 0 THEN
        RETURN;
    END IF;
    FOR v_one IN
        SELECT w.job FROM unnest(v_job) AS w(job)
        CROSS JOIN LATERAL (
            SELECT x.status, x.lease_until, x.keep_until FROM {runs} x
             WHERE x.prefix = p_prefix AND x.job = w.job ORDER BY x.slot LIMIT 1) o
        WHERE o.keep_until < v_now
          AND NOT (o.status = 'running' AND coalesce(o.lease_until >= v_now, false))
          AND {sweeps_now}
    LOOP
{sweep_job}
    END LOOP;
    RETURN;
END
$anarchon$
