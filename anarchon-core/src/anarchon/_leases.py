"""The lease rules L1-L11 as pure functions over one run's state.

Stores that decide in Python (memory, SQLite) call these inside their atomic step, so the rules
are written once; stores that decide inside the server (Lua, SQL) implement the same table and are
checked against `memory://` by the conformance kit.
"""

from __future__ import annotations

import zlib
from collections.abc import Callable

import attrs

from ._claims import Claim, ClaimRequest, Outcome, Overlap
from ._runs import RunRecord, RunStatus

__all__ = [
    "INTERRUPTED_REASON",
    "OVERLAP_REASON",
    "SWEEP_EVERY_DIVISOR",
    "SWEEP_EVERY_MAX",
    "claim_from_outcome",
    "decide_claim",
    "keep_until",
    "late_reason",
    "sweep_every",
    "sweeps_now",
]


OVERLAP_REASON = "another run of this job holds a live lease and overlap is 'skip'"
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


def decide_claim(
    run: RunRecord | None,
    request: ClaimRequest,
    now: int,
    *,
    floor: int | None,
    other_live: Callable[[], bool],
) -> tuple[Claim, RunRecord | None]:
    """Apply L1-L6 to `run` (None: no run). Returns the answer and the state to write (None: no
    write). `other_live()` tells whether another slot of the job holds a lease at `now`."""
    if run is None:
        reason = late_reason(request, now, floor)
        if reason is not None:
            return Claim(outcome=Outcome.LATE, reason=reason), None
        if request.overlap is Overlap.SKIP and other_live():
            return Claim(
                outcome=Outcome.OVERLAP,
                reason=OVERLAP_REASON,
            ), None
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
        error=f"lease of attempt {run.attempt} ran out with no attempts left",
    )
    return Claim(
        outcome=Outcome.DONE,
        attempt=run.attempt,
        token=run.token,
        holder=run.holder,
        lease_until=run.lease_until,
        reason=INTERRUPTED_REASON,
    ), interrupted


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
) -> Claim:
    """The `Claim` for an answer decided inside a store's server (a Lua script, a SQL function)
    in the words `decide_claim` uses: outcome ``won``, ``running``, ``late``, ``overlap``,
    ``done`` (with the run's `status`) or ``interrupted`` (L5). Raises `ValueError` for an
    outcome or status anarchon never answers: the caller reports it as `StoreCorrupt`, naming
    its key or table."""
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
    if outcome == "overlap":
        return Claim(outcome=Outcome.OVERLAP, reason=OVERLAP_REASON)
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
