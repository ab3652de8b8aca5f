-- The L11 sweep of one job, shared by both claim functions (`_plpgsql.sweep_job` puts it in
-- their bodies, indented, before they are formatted, so it holds their {runs}, {jobs} and
-- {sweep}). $PREFIX, $JOB and $LIMIT are replaced by SQL expressions of the function's own
-- variables: the prefix, the job and the history limit. It counts the job's runs up to the limit
-- plus {sweep} and deletes the oldest beyond the limit while they are past keep_until and hold
-- no live lease, raising the job's floor. Skip records are runs here like any other. Uses the
-- variables v_now, v_count, v_excess, v_oldest and v_last.

SELECT count(*) INTO v_count FROM (
    SELECT 1 FROM {runs} x WHERE x.prefix = $PREFIX AND x.job = $JOB LIMIT $LIMIT + {sweep}) c;
v_excess := least(v_count - $LIMIT, {sweep});
v_last := NULL;
IF v_excess > 0 THEN
    FOR v_oldest IN
        SELECT x.slot, x.status, x.lease_until, x.keep_until FROM {runs} x
        WHERE x.prefix = $PREFIX AND x.job = $JOB ORDER BY x.slot LIMIT v_excess
    LOOP
        EXIT WHEN NOT (v_oldest.keep_until < v_now AND NOT (
            v_oldest.status = 'running' AND coalesce(v_oldest.lease_until >= v_now, false)));
        v_last := v_oldest.slot;
    END LOOP;
    IF v_last IS NOT NULL THEN
        DELETE FROM {runs} x WHERE x.prefix = $PREFIX AND x.job = $JOB AND x.slot <= v_last;
        UPDATE {jobs} j SET floor = greatest(j.floor, v_last)
            WHERE j.prefix = $PREFIX AND j.job = $JOB;
    END IF;
END IF;
