"""The lease rules L1-L11 as pure functions over one run's state.

Stores that decide in Python (memory, SQLite) call these inside their atomic step, so the rules
are written once; stores that decide inside the server (Lua, SQL) implement the same table and are
checked against `memory://` by the conformance kit.
"""

from __future__ import annotations

import zlib
from collections.abc import Callable
from typing import Literal

import attrs

from ._claims import Claim, ClaimRequest, Outcome, Overlap
from ._errors import ConfigError
from ._retries import append_try
from ._runs import RunRecord, RunStatus

__all__ = [
    "INTERRUPTED_REASON",
    "SWEEP_EVERY_DIVISOR",
    "SWEEP_EVERY_MAX",
    "claim_from_outcome",
    "decide_claim",
    "decide_finish",
    "early_claim_error",
    "judge_window",
    "keep_until",
    "late_reason",
    "overlap_reason",
    "skip_record",
    "skipped_claim",
    "sweep_every",
    "sweeps_now",
]


def overlap_reason(holding_slot: int) -> str:
    """L1: the reason recorded for a slot skipped because `holding_slot` holds a live lease."""
    return f"overlap: slot {holding_slot} of this job holds a live lease and overlap is 'skip'"


INTERRUPTED_REASON = "run interrupted: the last attempt's lease ran out"

SWEEP_EVERY_MAX = 64
"""L11 in steady state: a store that counts a job's runs to find what may go (a walk of up to
``history_limit`` index entries) does so only on about one claim in `sweep_every`, at least once
in this many, and then sweeps up to its batch (100 runs in the shipped stores)."""
SWEEP_EVERY_DIVISOR = 16
"""`sweep_every` is ``history_limit`` divided by this: the runs a full history holds beyond its
limit, on average, are about a sixteenth of it."""


def sweep_every(history_limit: int) -> int:
    """One claim in how many counts and sweeps: ``history_limit / 16``, from 1 to
    `SWEEP_EVERY_MAX`, so a job's history holds about that many runs beyond its limit while the
    count costs a claim a few microseconds on average."""
    return max(1, min(SWEEP_EVERY_MAX, history_limit // SWEEP_EVERY_DIVISOR))


def sweeps_now(job: str, slot: int, history_limit: int) -> bool:
    """Whether the claim of (job, slot) is one that sweeps: picked by a hash of both, so the
    same claim always decides alike and the jobs of one slot do not all sweep at once."""
    every = sweep_every(history_limit)
    return every == 1 or zlib.crc32(f"{job}\0{slot}".encode()) % every == 0


def keep_until(request: ClaimRequest, margin_ms: int) -> int:
    """L11: the run may be deleted after this instant (store clock, epoch ms)."""
    return request.slot + request.max_late_ms + request.attempts * request.lease_ms + margin_ms


def late_reason(request: ClaimRequest, now: int, floor: int | None) -> str | None:
    """L1: why a slot with no run can no longer be claimed, or None if it can."""
    if floor is not None and request.slot <= floor:
        return (
            f"forgotten: slot {request.slot} is at or below the oldest slot this store still "
            f"remembers for job {request.job!r} ({floor}); the run may have happened and was deleted"
        )
    age = now - request.slot
    if age > request.max_late_ms:
        return f"late: slot is {age} ms old, max_late is {request.max_late_ms} ms"
    return None


def early_claim_error(request: ClaimRequest, now: int, remembers_ms: int) -> ConfigError | None:
    """C1 for a claim sent before its slot, on a store that remembers a claim for `remembers_ms`
    counted from when it is written (a window, not from the slot): the error refusing a claim
    the store could not remember until ``slot + max_late_ms``, when the slot can still be
    claimed; None if it can. The scheduler never claims before a slot (T2)."""
    ahead = request.slot - now
    allowed = remembers_ms - request.max_late_ms
    if ahead <= allowed:
        return None
    why = (
        f"claim of job {request.job!r} at slot {request.slot} refused: the slot is {ahead} ms "
        f"ahead of the clock, and this store remembers a claim for {remembers_ms} ms from when "
        f"it is written, so it could forget the claim while the slot can still be claimed "
        f"(max_late {request.max_late_ms} ms) and let a second instance win it (rule C5)."
    )
    if allowed <= 0:
        return ConfigError(
            f"{why} Even at its slot such a claim is not safe: set max_late to at most "
            f"{remembers_ms} ms, or make the store remember longer (rule T3)"
        )
    return ConfigError(
        f"{why} Claim at most {allowed} ms before the slot (the scheduler claims at the slot)"
    )


def judge_window(
    request: ClaimRequest,
    now: int,
    *,
    remembers_ms: int,
    memory: str,
    written_ms: int | None = None,
) -> Claim | None:
    """T4, T3 and C5 for a store with no clock of its own that remembers a claim for a window
    counted from when it is written (NATS' duplicate window, a RabbitMQ queue's expiry), judged
    at `now` by the instance's clock. `late` for a slot older than ``max_late_ms``, or older than
    the store remembers a run after its slot (`remembers_ms`, T3: a claim sent then could win the
    run again; `memory` names the store in the reason); nothing is to be sent. Raises the
    `early_claim_error` (C5) for a claim so far ahead of its slot that a claim written now,
    remembered for `written_ms` (default `remembers_ms`), could be forgotten while the slot can
    still be claimed. None: send the claim."""
    age = now - request.slot
    if age > request.max_late_ms:
        return Claim(
            outcome=Outcome.LATE,
            reason=f"the slot is {age} ms old by this instance's clock, more than max_late "
            f"({request.max_late_ms} ms)",
        )
    if age > remembers_ms:
        return Claim(
            outcome=Outcome.LATE,
            reason=f"the slot is {age} ms old, older than {memory} remembers a run "
            f"({remembers_ms} ms, T3)",
        )
    if age < 0:
        # Only ahead of the slot: from the slot on, the T3 check above refuses every claim made
        # after a claim written at the slot could be forgotten.
        error = early_claim_error(request, now, remembers_ms if written_ms is None else written_ms)
        if error is not None:
            raise error
    return None


def skip_record(request: ClaimRequest, now: int, reason: str) -> RunRecord:
    """The ledger's record of a slot decided not to run: attempt 0, the deciding claim's token
    and instance, finished at `now`, the reason (which starts with its kind) as its error."""
    return RunRecord(
        job=request.job,
        slot=request.slot,
        status=RunStatus.SKIPPED,
        attempt=0,
        token=request.token,
        holder=request.instance,
        claimed_at=now,
        lease_until=None,
        finished_at=now,
        error=reason,
    )


def skipped_claim(run: RunRecord) -> Claim:
    """The answer to every claim of a slot whose record is a skip."""
    return Claim(
        outcome=Outcome.SKIPPED,
        attempt=run.attempt,
        token=run.token,
        holder=run.holder,
        reason=run.error or "skipped",
    )


def decide_claim(
    run: RunRecord | None,
    request: ClaimRequest,
    now: int,
    *,
    floor: int | None,
    other_live: Callable[[], int | None],
) -> tuple[Claim, RunRecord | None]:
    """Apply L1-L6 to `run` (None: no run). Returns the answer and the state to write (None: no
    write). `other_live()` returns a slot of the job, other than this one, that holds a lease at
    `now` (None if none does): with overlap ``skip`` the claim records a skip naming it.

    L1 writes a record for every slot it decides: a late slot above the floor is recorded
    ``skipped`` (``late: ...``), an overlapping one ``skipped`` (``overlap: ...``), one whose
    request carries a `skip_reason` ``skipped`` with that reason; only a forgotten slot (at or
    below the floor) answers `late` with nothing written, since its run may have happened."""
    if run is None:
        reason = late_reason(request, now, floor)
        if reason is not None:
            if floor is not None and request.slot <= floor:
                return Claim(outcome=Outcome.LATE, reason=reason), None
            record = skip_record(request, now, reason)
            return skipped_claim(record), record
        if request.skip_reason is not None:
            record = skip_record(request, now, request.skip_reason)
            return skipped_claim(record), record
        if request.overlap is Overlap.SKIP:
            holding = other_live()
            if holding is not None:
                record = skip_record(request, now, overlap_reason(holding))
                return skipped_claim(record), record
        new = RunRecord(
            job=request.job,
            slot=request.slot,
            status=RunStatus.RUNNING,
            attempt=1,
            token=request.token,
            holder=request.instance,
            claimed_at=now,
            lease_until=now + request.lease_ms,
        )
        return _won(new), new
    if run.status is RunStatus.SKIPPED:
        return skipped_claim(run), None
    if run.status.finished:  # L6
        return Claim(
            outcome=Outcome.DONE,
            attempt=run.attempt,
            token=run.token,
            holder=run.holder,
            lease_until=run.lease_until,
            reason=f"run {run.status}",
        ), None
    if run.token == request.token:  # L2
        return _won(run), None
    lease_until = run.lease_until if run.lease_until is not None else now
    if lease_until >= now:  # L3
        return Claim(
            outcome=Outcome.RUNNING,
            attempt=run.attempt,
            token=run.token,
            holder=run.holder,
            lease_until=run.lease_until,
        ), None
    if run.attempt < request.attempts:  # L4
        taken = attrs.evolve(
            run,
            attempt=run.attempt + 1,
            token=request.token,
            holder=request.instance,
            claimed_at=now,
            lease_until=now + request.lease_ms,
        )
        return _won(taken), taken
    interrupted = attrs.evolve(  # L5
        run,
        status=RunStatus.INTERRUPTED,
        finished_at=now,
        # The try log of a retried run (L12) stays: the entry is appended to it.
        error=append_try(
            run.error, f"lease of attempt {run.attempt} ran out with no attempts left"
        ),
    )
    return Claim(
        outcome=Outcome.DONE,
        attempt=run.attempt,
        token=run.token,
        holder=run.holder,
        lease_until=run.lease_until,
        reason=INTERRUPTED_REASON,
    ), interrupted


def decide_finish(
    run: RunRecord | None, token: str, status: RunStatus
) -> Literal["write", "again", "fenced"]:
    """L8 with C2 for finish: ``write`` the final status while running with `token`; ``again``
    (answer True, write nothing) when the run already finished with the same token and status, so
    a finish resent after its first answer was lost is not mistaken for fencing; else ``fenced``
    (answer False: another attempt holds or finished the run)."""
    if run is None or run.token != token:
        return "fenced"
    if run.status is RunStatus.RUNNING:
        return "write"
    return "again" if run.status is status else "fenced"


def _won(run: RunRecord) -> Claim:
    return Claim(
        outcome=Outcome.WON,
        attempt=run.attempt,
        token=run.token,
        holder=run.holder,
        lease_until=run.lease_until,
    )


def claim_from_outcome(
    request: ClaimRequest,
    outcome: str,
    *,
    attempt: int,
    token: str,
    holder: str,
    lease_until: int | None,
    status: str,
    now: int,
    floor: int | None,
    reason: str | None = None,
) -> Claim:
    """The `Claim` for an answer decided inside a store's server (a Lua script, a SQL function)
    in the words `decide_claim` uses: outcome ``won``, ``running``, ``late`` (forgotten: nothing
    written), ``skipped`` (with the recorded reason in `reason`), ``done`` (with the run's
    `status`) or ``interrupted`` (L5). Raises `ValueError` for an outcome or status anarchon
    never answers: the caller reports it as `StoreCorrupt`, naming its key or table."""
    if outcome in ("won", "running"):
        return Claim(
            outcome=Outcome.WON if outcome == "won" else Outcome.RUNNING,
            attempt=attempt,
            token=token,
            holder=holder,
            lease_until=lease_until,
        )
    if outcome == "late":
        return Claim(outcome=Outcome.LATE, reason=late_reason(request, now, floor) or "late")
    if outcome == "skipped":
        return Claim(
            outcome=Outcome.SKIPPED,
            attempt=attempt,
            token=token,
            holder=holder,
            reason=reason or "skipped",
        )
    if outcome == "done":
        reason = f"run {RunStatus(status)}"
    elif outcome == "interrupted":
        reason = INTERRUPTED_REASON
    else:
        raise ValueError(f"unknown outcome {outcome!r}")
    return Claim(
        outcome=Outcome.DONE,
        attempt=attempt,
        token=token,
        holder=holder,
        lease_until=lease_until,
        reason=reason,
    )
