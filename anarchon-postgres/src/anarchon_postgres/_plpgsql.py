"""What both claim functions' bodies share: the loading of their text from ``_sql/``, the answer
they print, the reasons of the skips they record (the texts of `anarchon.backend.late_reason`
and `overlap_reason`, to the character, and a pause's, P1), the retention sweep, the lock
timeout.

The bodies are ``.sql`` files beside the code (``_sql/claim.sql``, ``_sql/claim_many.sql``, and
``_sql/sweep.sql`` which both include), as the Redis backend keeps its ``.lua``. Their
placeholders are filled with `psycopg.sql`: names as quoted identifiers (validated to
``[A-Za-z_][A-Za-z0-9_]*`` by the options, so no name can close the ``$anarchon$`` quote of a
body), numbers as literals, and the expressions built here (trusted: the functions' own
variables and column names). Every helper returns such SQL text for a body that `_function` or
`_many_function` formats afterwards, so it must hold no braces but theirs.
"""

from __future__ import annotations

from importlib.resources import files

from psycopg import sql

from anarchon.backend import (
    MAX_TRY_LOG_CHARS,
    PAUSED,
    SWEEP_EVERY_DIVISOR,
    SWEEP_EVERY_MAX,
    TRY_SEPARATOR,
)

__all__ = [
    "ANSWER_FIELDS",
    "SWEEP_MAX_ROWS",
    "answer",
    "late_reason",
    "lock_timeout_setting",
    "overlap_reason",
    "pause_reason",
    "paused",
    "run_answer",
    "source",
    "sweep_job",
    "sweeps_now",
]

SWEEP_MAX_ROWS = 100
"""L11: one claim deletes at most this many forgotten runs, so its latency stays bounded."""

ANSWER_FIELDS = ("outcome", "attempt", "lease_until", "status", "now", "floor", "token", "holder")
"""An answer, in order, separated by single spaces; an empty field is NULL. The token and the
holder (free-form, so last) are set when the outcome has a run. A ``skipped`` answer adds a
newline and the skip's reason after the holder: a reason is printable text (`ClaimRequest`
checks it; the store writes no other), so the last newline of the answer starts it."""

_TIME_UNITS = (("d", 86_400_000), ("h", 3_600_000), ("min", 60_000), ("s", 1000))


def append_try(log: str, entry: str) -> str:
    """L12: the try log `log` with `entry` appended, its last `MAX_TRY_LOG_CHARS` characters
    kept, as `anarchon.backend.append_try` does (both SQL expressions)."""
    return (
        f"CASE WHEN {log} IS NULL OR {log} = '' THEN right({entry}, {MAX_TRY_LOG_CHARS}) "
        f"ELSE right({log} || '{TRY_SEPARATOR}' || {entry}, {MAX_TRY_LOG_CHARS}) END"
    )


def late_reason(age: str, max_late: str) -> str:
    """SQL for `anarchon.backend.late_reason`'s text of a late slot (L1), from the slot's age
    and max_late in ms (integer expressions, printed as Python prints an int)."""
    return f"format('late: slot is %s ms old, max_late is %s ms', {age}, {max_late})"


def overlap_reason(holding_slot: str) -> str:
    """SQL for `anarchon.backend.overlap_reason`'s text, naming the slot holding a live lease."""
    return (
        "format('overlap: slot %s of this job holds a live lease and overlap is ''skip''', "
        f"{holding_slot})"
    )


def pause_reason(pause: str) -> str:
    """SQL for the reason P1 records for a paused job's slot: ``paused``, or ``paused: `` and the
    pause's reason; `pause` qualifies the pause's columns (``z.``)."""
    return f"CASE WHEN {pause}reason = '' THEN '{PAUSED}' ELSE '{PAUSED}: ' || {pause}reason END"


def paused(pause: str, prefix: str, job: str, now: str) -> str:
    """SQL condition on a row of the pauses table (`pause` qualifies its columns): the pause of
    (`prefix`, `job`) in force at `now` (SQL expressions). Its key is (prefix, job): one probe."""
    return (
        f"{pause}prefix = {prefix} AND {pause}job = {job} "
        f"AND ({pause}until_ms IS NULL OR {pause}until_ms > {now})"
    )


def answer(*fields: str, reason: str | None = None) -> str:
    """SQL for an answer from one expression per `ANSWER_FIELDS`, and for ``skipped`` the
    expression of its reason (NULL: none follows). ``concat()`` prints NULL as an empty field and
    leaves out a NULL reason (and costs a call less than ``format()``)."""
    assert len(fields) == len(ANSWER_FIELDS)
    tail = "" if reason is None else f", E'\\n' || {reason}"
    return "concat(" + ", ' ', ".join(fields) + tail + ")"


def run_answer(run: str, token: str) -> str:
    """SQL for the answer of a run that needs no write: a skip record (S1), finished (L6), the
    caller's own (L2) or held by a live lease (L3). `run` qualifies the run's columns (``x.``),
    `token` is the caller's; ``v_now`` is the clock."""
    outcome = (
        f"CASE WHEN {run}status = 'skipped' THEN 'skipped' WHEN {run}status <> 'running' THEN "
        f"'done' WHEN {run}token = {token} THEN 'won' ELSE 'running' END"
    )
    columns = (f"{run}{c}" for c in ("attempt", "lease_until", "status"))
    reason = f"CASE WHEN {run}status = 'skipped' THEN coalesce({run}error, '') END"
    return answer(outcome, *columns, "v_now", "NULL", f"{run}token", f"{run}holder", reason=reason)


def source(name: str) -> str:
    """The text of ``_sql/<name>`` without its header: the comment lines it starts with. What
    follows them (from the blank line that ends the header) is the statement as PostgreSQL gets
    it, placeholders aside."""
    text = files("anarchon_postgres").joinpath("_sql").joinpath(name).read_text(encoding="utf-8")
    lines = text.split("\n")
    start = 0
    while start < len(lines) and lines[start].startswith("--"):
        start += 1
    return "\n".join(lines[start:])


def sweep_job(prefix: str, job: str, history_limit: str, indent: int) -> str:
    """PL/pgSQL of the L11 sweep of one job (``_sql/sweep.sql``), for both claim functions'
    bodies (before they are formatted: it holds their ``{runs}``, ``{jobs}`` and ``{sweep}``),
    indented by `indent` spaces. The arguments are SQL expressions for its ``$PREFIX``,
    ``$JOB`` and ``$LIMIT``."""
    text = source("sweep.sql")
    text = text.replace("$PREFIX", prefix).replace("$JOB", job).replace("$LIMIT", history_limit)
    pad = " " * indent
    return "\n".join(pad + line if line else line for line in text.strip("\n").split("\n"))


def sweeps_now(job: str, slot: str, history_limit: str) -> sql.SQL:
    """The SQL condition "this claim does the job's retention sweep": true for about one claim in
    ``clamp(history_limit / 16, 1, SWEEP_EVERY_MAX)``, picked by a hash of (job, slot), so that
    the same claim always decides alike and jobs of one slot do not all sweep at once (the rate
    of `anarchon.backend.sweep_every`). Arguments are SQL expressions (trusted: the functions'
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
