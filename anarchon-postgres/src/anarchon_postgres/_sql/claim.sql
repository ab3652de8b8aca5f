-- The claim function, <table>_claim(request text, skip_reason text) RETURNS text: one claim in
-- one round trip (C1, S1, L1-L6, L11). `_function` explains the request, the answer and the
-- steps, and fills in the placeholders before PostgreSQL gets this text:
--   {claim}, {runs}, {jobs}, {pauses}
--                             the quoted names of the function and tables (see `_names`)
--   {sweep}                   `_plpgsql.SWEEP_MAX_ROWS`, as a literal
--   {sweeps_now}              the condition "this claim sweeps" (`_plpgsql.sweeps_now`)
--   {sweep_job}               the L11 sweep of `sweep.sql`, indented (`_plpgsql.sweep_job`)
--   {answer_*}, {late_reason}, {overlap_reason}, {pause_reason}
--                             the answers and skip reasons (`_function._ANSWERS`), so that the
--                             answer format (`_plpgsql.ANSWER_FIELDS`) is written once
--   {paused}                  the condition on a row z of {pauses}: this job's pause, in force
-- The text from the blank line below to the end is the statement, to the byte: a changed
-- character is a changed body (bump `_code.FUNCTIONS_VERSION`; a test pins the digest).
--
-- Every statement of PL/pgSQL that reads a table is a query (a plan to check, locks to take, an
-- executor to start), which costs a claim about as much as its server time for a row; an
-- expression that reads none (an assignment, an IF) costs next to nothing. So the body spends
-- queries only where it must: the usual loss is one query, the usual win four (the read, the
-- lock, the INSERT, which is also the overlap check and the pause check (P1), the retention
-- seek). A decided skip costs
-- two or three more (the run read FOR UPDATE, the overlap seek naming the slot, the INSERT of the
-- record), once per slot: later claims read the record before the lock. The request is split in
-- the query of the read (split_part), and into an array only after it.

CREATE OR REPLACE FUNCTION {claim}(p text, p_skip_reason text) RETURNS text
LANGUAGE plpgsql VOLATILE AS $anarchon$
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
        -- inserted if absent, the job is not paused (P1: one probe of the pause's key) and, for
        -- overlap skip, no other run of the job holds a live lease: the usual win is this one
        -- statement.
        IF (v_floor IS NULL OR v_slot > v_floor) AND v_now - v_slot <= a[5]::bigint
           AND p_skip_reason IS NULL THEN
            INSERT INTO {runs} (prefix, job, slot, status, attempt, token, holder, claimed_at,
                                lease_until, finished_at, error, keep_until)
                SELECT a[1], a[2], v_slot, 'running', 1, a[4], v_holder, v_now,
                       v_now + a[8]::bigint, NULL, NULL, a[10]::bigint
                 WHERE NOT EXISTS (SELECT 1 FROM {pauses} z WHERE {paused})
                   AND (a[6] <> '1' OR NOT EXISTS (
                       SELECT 1 FROM {runs} x WHERE x.prefix = a[1] AND x.job = a[2]
                          AND x.status = 'running' AND x.lease_until >= v_now AND x.slot <> v_slot))
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
                        error = {interrupted_error}
                    WHERE x.prefix = a[1] AND x.job = a[2] AND x.slot = v_slot;
                RETURN {answer_interrupted};
            END IF;
            -- No run: L1, in its order, with P1 before the caller's skip reason.
            IF v_floor IS NOT NULL AND v_slot <= v_floor THEN
                RETURN {answer_late};  -- forgotten (L11): its run may have been; nothing written
            ELSIF v_now - v_slot > a[5]::bigint THEN
                v_reason := {late_reason};
            ELSE
                -- P1: a paused job's slot is a skip the store decides, whatever the request says.
                SELECT {pause_reason} INTO v_reason FROM {pauses} z WHERE {paused};
                IF v_reason IS NOT NULL THEN
                    NULL;
                ELSIF p_skip_reason IS NOT NULL THEN
                    v_reason := p_skip_reason;
                ELSIF a[6] = '1' THEN
                    -- The INSERT found a live lease: name the slot that holds it. None (it
                    -- finished or was released since): the slot is claimable after all.
                    SELECT {overlap_reason} INTO v_reason
                      FROM {runs} x WHERE x.prefix = a[1] AND x.job = a[2]
                       AND x.status = 'running' AND x.lease_until >= v_now AND x.slot <> v_slot
                     LIMIT 1;
                END IF;
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
$anarchon$
