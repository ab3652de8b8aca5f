"""The claim as one server-side function, so a claim is one round trip (C1, L1-L6, L11).

``<table>_claim(request text) RETURNS text`` runs inside the single statement that calls it,
``SELECT <table>_claim($1)``. The request and the answer are each one text of space-separated
fields (see `REQUEST_FIELDS` and `ANSWER_FIELDS`): every argument and every result column costs
a call about as much as a read of a row does, so one of each is what makes a claim barely dearer
than ``SELECT 1``. The steps:

1. **The read before the lock.** One plain read of the run (when there is none, the lateness
   check and, for overlap ``skip``, one index seek for another live run). A finished run, the
   caller's own run, a live lease, a late slot and an overlap are answered here (the query of the
   read builds the answer): the transaction stays read-only, so it takes no row lock, gets no
   transaction id and needs no WAL flush. Losing costs a read; so does a backup's check (L10).
2. **The lock.** Otherwise ``SELECT ... FOR UPDATE`` of the job's row in ``<table>_jobs``
   (which also returns the job's forgotten floor, L11), or, for a job never claimed, ``INSERT ...
   ON CONFLICT DO NOTHING`` of that row (a row inserted is locked by its inserter; when another
   claim inserted it first, the ``SELECT ... FOR UPDATE`` is tried again). PostgreSQL holds that
   row lock until the statement commits, so claims of one job take turns; the row itself is not
   rewritten (no new row version, no dead tuple per claim). ``now`` is read from
   ``clock_timestamp()`` *after* the lock (``now()`` is frozen at the transaction start, T1);
   every later statement takes a fresh snapshot (READ COMMITTED), so it sees what the previous
   claim of the job wrote. A claimable slot is then ``INSERT ... ON CONFLICT DO NOTHING``, whose
   condition is also the overlap check: the usual win is that one statement. Otherwise the run
   is read ``FOR UPDATE``: absent, it was an overlap; present, it is decided as
   `anarchon._leases.decide_claim` does, in SQL: takeover, interrupted, or nothing.
3. **Retention (L11)**, on a new run only, bounded to `SWEEP_MAX_ROWS` deletions per claim.

The answer's outcome is one of won, running, done, interrupted (L5: done), late, overlap. The
request's ``now`` is empty except in tests that drive a manual clock.

Releases before this one created ``<table>_claim`` with 13 arguments and 8 result columns. A
changed signature is another function: opening creates this one next to it and leaves the old
one in place, so instances of the older release keep claiming during a rolling upgrade (both
take the same row lock and write the same rows).
"""

from __future__ import annotations

from psycopg import sql

from anarchon._leases import SWEEP_EVERY_DIVISOR, SWEEP_EVERY_MAX

from ._names import Names

__all__ = [
    "ANSWER_FIELDS",
    "ARGUMENT_TYPES",
    "REQUEST_FIELDS",
    "SWEEP_MAX_ROWS",
    "answer",
    "create_function",
    "lock_timeout_setting",
    "quoted_body",
    "run_answer",
    "sweep_job",
    "sweeps_now",
]

SWEEP_MAX_ROWS = 100
"""L11: one claim deletes at most this many forgotten runs, so its latency stays bounded."""

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

ANSWER_FIELDS = ("outcome", "attempt", "lease_until", "status", "now", "floor", "token", "holder")
"""The answer, in order, separated by single spaces; an empty field is NULL. The token and the
holder (free-form, so last) are set when the outcome has a run."""

ARGUMENT_TYPES = "text"
"""The function's signature, for ``to_regprocedure``."""

_TIME_UNITS = (("d", 86_400_000), ("h", 3_600_000), ("min", 60_000), ("s", 1000))


_SWEEP = """
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
"""


def sweep_job(prefix: str, job: str, history_limit: str, indent: int) -> str:
    """PL/pgSQL of the L11 sweep of one job, for both claim functions' bodies (before they are
    formatted: it holds their ``{runs}``, ``{jobs}`` and ``{sweep}``): count the job's runs up
    to the limit plus `SWEEP_MAX_ROWS`, and delete the oldest beyond the limit while they are
    past ``keep_until`` and hold no live lease, raising the job's floor. Uses the variables
    v_now, v_count, v_excess, v_oldest and v_last; the arguments are SQL expressions."""
    text = _SWEEP.replace("$PREFIX", prefix).replace("$JOB", job).replace("$LIMIT", history_limit)
    pad = " " * indent
    return "\n".join(pad + line if line else line for line in text.strip("\n").split("\n"))


def sweeps_now(job: str, slot: str, history_limit: str) -> sql.SQL:
    """The SQL condition "this claim does the job's retention sweep": true for about one claim in
    ``clamp(history_limit / 16, 1, SWEEP_EVERY_MAX)``, picked by a hash of (job, slot), so that
    the same claim always decides alike and jobs of one slot do not all sweep at once (the rate
    of `anarchon._leases.sweep_every`). Arguments are SQL expressions (trusted: the functions'
    own variables)."""
    every = f"greatest(1, least({SWEEP_EVERY_MAX}, {history_limit} / {SWEEP_EVERY_DIVISOR}))"
    return sql.SQL(f"mod((hashtext({job}) # hashint8({slot})) & 2147483647, {every}) = 0")


def lock_timeout_setting(ms: int) -> str:
    """`ms` as ``current_setting('lock_timeout')`` shows it (the largest unit that divides it:
    ``30s``, ``1500ms``), so the claim function sets the lock timeout only when the connection
    does not have it already."""
    for unit, size in _TIME_UNITS:
        if ms and ms % size == 0:
            return f"{ms // size}{unit}"
    return f"{ms}ms" if ms else "0"


def answer(*fields: str) -> str:
    """SQL for an answer from one expression per `ANSWER_FIELDS`: ``concat()`` prints NULL as an
    empty field (and costs a call less than ``format()``)."""
    assert len(fields) == len(ANSWER_FIELDS)
    return "concat(" + ", ' ', ".join(fields) + ")"


def run_answer(run: str, token: str) -> str:
    """SQL for the answer of a run that needs no write: finished (L6), the caller's own (L2) or
    held by a live lease (L3). `run` qualifies the run's columns (``x.``), `token` is the
    caller's; ``v_now`` is the clock."""
    outcome = (
        f"CASE WHEN {run}status <> 'running' THEN 'done' WHEN {run}token = {token} THEN 'won' "
        "ELSE 'running' END"
    )
    columns = (f"{run}{c}" for c in ("attempt", "lease_until", "status"))
    return answer(outcome, *columns, "v_now", "NULL", f"{run}token", f"{run}holder")


# Every statement of PL/pgSQL that reads a table is a query (a plan to check, locks to take, an
# executor to start), which costs a claim about as much as its server time for a row; an
# expression that reads none (an assignment, an IF) costs next to nothing. So the body spends
# queries only where it must: the usual loss is one query, the usual win four (the read, the
# lock, the INSERT, the retention seek), five with overlap skip (the overlap seek before the
# lock; the one under the lock is part of the INSERT). The request is split in the query of the
# read (split_part), and into an array only after it.
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
                RETURN {answer_late};
            END IF;
            -- (Nested IFs: an IF whose condition reads a table is a query even when the test
            -- before its AND is false.)
            IF a[6] = '1' THEN
                IF EXISTS (
                    SELECT 1 FROM {runs} x WHERE x.prefix = a[1] AND x.job = a[2]
                        AND x.status = 'running' AND x.lease_until >= v_now AND x.slot <> v_slot
                ) THEN
                    SELECT j.floor INTO v_floor FROM {jobs} j
                     WHERE j.prefix = a[1] AND j.job = a[2];
                    RETURN {answer_overlap};
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

        -- 3. The decision, under the lock (T1: the clock read after it).
        IF (v_floor IS NOT NULL AND v_slot <= v_floor) OR v_now - v_slot > a[5]::bigint THEN
            v_outcome := 'late';
        ELSE
            -- Claimable if absent and, for overlap skip, no other run of the job holds a live
            -- lease: the usual win is this one statement.
            INSERT INTO {runs} (prefix, job, slot, status, attempt, token, holder, claimed_at,
                                lease_until, finished_at, error, keep_until)
                SELECT a[1], a[2], v_slot, 'running', 1, a[4], v_holder, v_now,
                       v_now + a[8]::bigint, NULL, NULL, a[10]::bigint
                 WHERE a[6] <> '1' OR NOT EXISTS (
                       SELECT 1 FROM {runs} x WHERE x.prefix = a[1] AND x.job = a[2]
                          AND x.status = 'running' AND x.lease_until >= v_now AND x.slot <> v_slot)
                ON CONFLICT (prefix, job, slot) DO NOTHING;
            v_exists := NOT FOUND;  -- not inserted: the run exists, or an overlap
        END IF;
        IF v_outcome IS NOT NULL OR v_exists THEN  -- decide on the run (L2-L6) if it exists
            SELECT x.status, x.attempt, x.token, x.holder, x.lease_until
              INTO v_status, v_attempt, v_token, v_run_holder, v_lease_until
              FROM {runs} x WHERE x.prefix = a[1] AND x.job = a[2] AND x.slot = v_slot
               FOR UPDATE;
            IF NOT FOUND THEN  -- late, or (not inserted, no run) an overlap
                v_outcome := coalesce(v_outcome, 'overlap');
                RETURN {answer_locked};
            END IF;
        ELSE
            -- 4. Retention (L11): only when the job's oldest run could go does it cost more than
            -- this one seek; and then counting the job's runs walks up to history_limit index
            -- entries, so only one claim in about history_limit / 16 (at most 64) counts and
            -- sweeps (up to {sweep} runs), picked by a hash of (job, slot): a job's history
            -- holds about history_limit / 16 runs beyond its limit, at a few microseconds a claim.
            SELECT x.status, x.lease_until, x.keep_until
              INTO v_first_status, v_first_lease_until, v_first_keep_until
              FROM {runs} x WHERE x.prefix = a[1] AND x.job = a[2] ORDER BY x.slot LIMIT 1;
            IF v_first_keep_until < v_now
               AND NOT (v_first_status = 'running'
                        AND coalesce(v_first_lease_until >= v_now, false))
               AND {sweeps_now}
            THEN
{sweep_job}
            END IF;
            RETURN {answer_won};
        END IF;

        -- The run exists (locked FOR UPDATE): L2-L6.
        IF v_status <> 'running' OR v_token = a[4] OR v_lease_until >= v_now THEN  -- L6, L2, L3
            RETURN {answer_run};
        ELSIF v_attempt < a[9]::integer THEN                                      -- L4
            UPDATE {runs} x SET attempt = v_attempt + 1, token = a[4], holder = v_holder,
                    claimed_at = v_now, lease_until = v_now + a[8]::bigint
                WHERE x.prefix = a[1] AND x.job = a[2] AND x.slot = v_slot;
            RETURN {answer_takeover};
        END IF;
        UPDATE {runs} x SET status = 'interrupted', finished_at = v_now,               -- L5
                error = format('lease of attempt %s ran out with no attempts left', v_attempt)
            WHERE x.prefix = a[1] AND x.job = a[2] AND x.slot = v_slot;
        RETURN {answer_interrupted};
    END;
END
"""

_ANSWERS = {
    "answer_read": run_answer("x.", "split_part(p, ' ', 4)"),
    # The run, read under the lock, answers without a write (L6, L2, L3).
    "answer_run": answer(
        "CASE WHEN v_status <> 'running' THEN 'done' WHEN v_token = a[4] THEN 'won' "
        "ELSE 'running' END",
        *("v_attempt", "v_lease_until", "v_status", "v_now", "NULL", "v_token", "v_run_holder"),
    ),
    "answer_late": answer("'late'", "0", "NULL", "NULL", "v_now", "NULL", "NULL", "NULL"),
    "answer_overlap": answer(
        "CASE WHEN v_slot <= v_floor THEN 'late' ELSE 'overlap' END",
        *("0", "NULL", "NULL", "v_now", "v_floor", "NULL", "NULL"),
    ),
    "answer_locked": answer("v_outcome", "0", "NULL", "NULL", "v_now", "v_floor", "NULL", "NULL"),
    "answer_won": answer(
        *("'won'", "1", "v_now + a[8]::bigint", "'running'", "v_now", "NULL", "a[4]", "v_holder")
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
}

_SIGNATURE = """
CREATE OR REPLACE FUNCTION {claim}(p text) RETURNS text
LANGUAGE plpgsql VOLATILE AS {body}
"""


def quoted_body(body: sql.Composable) -> sql.Composed:
    """A function body as a dollar-quoted string: identifiers are validated to [A-Za-z0-9_], so
    the quote tag cannot occur inside it."""
    return sql.Composed([sql.SQL("$anarchon$"), body, sql.SQL("$anarchon$")])


def create_function(names: Names) -> sql.Composed:
    """``CREATE OR REPLACE FUNCTION`` for the claim, with every name quoted."""
    answers = {name: sql.SQL(expression) for name, expression in _ANSWERS.items()}
    body = sql.SQL(
        _BODY.replace("{sweep_job}", sweep_job("a[1]", "a[2]", "a[11]::integer", 16))
    ).format(
        runs=names.runs,
        jobs=names.jobs,
        sweep=sql.Literal(SWEEP_MAX_ROWS),
        sweeps_now=sweeps_now("a[2]", "v_slot", "a[11]::integer"),
        **answers,
    )
    return sql.SQL(_SIGNATURE).format(claim=names.claim, body=quoted_body(body))
