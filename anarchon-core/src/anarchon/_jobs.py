"""A job as the scheduler knows it: name, schedule, policy, function."""

from __future__ import annotations

import inspect
from collections.abc import Awaitable, Callable
from typing import Any

import attrs

from ._claims import MAX_ATTEMPTS, Overlap
from ._durations import DurationLike, to_ms
from ._errors import ConfigError
from ._names import check_name
from ._run import Run
from ._schedule import Schedule

__all__ = ["JobFunction", "JobSpec", "make_job"]

JobFunction = Callable[..., Any] | Callable[..., Awaitable[Any]]

DEFAULT_LEASE_MS = 60_000
MAX_LATE_CAP_MS = 60_000


@attrs.frozen(kw_only=True)
class JobSpec:
    name: str
    schedule: Schedule | None
    """None for `once()`, which has no schedule of its own."""
    func: Callable[..., Any]
    is_async: bool
    takes_run: bool
    lease_ms: int
    heartbeat_ms: int
    max_late_ms: int
    overlap: Overlap | None
    """None: `skip` where the store supports it, `allow` elsewhere."""
    attempts: int


def _takes_run(func: Callable[..., Any], name: str) -> bool:
    try:
        params = list(inspect.signature(func).parameters.values())
    except (TypeError, ValueError):
        return False
    required = [
        p
        for p in params
        if p.default is p.empty and p.kind not in (p.VAR_POSITIONAL, p.VAR_KEYWORD)
    ]
    if len(required) > 1:
        raise ConfigError(
            f"job {name!r}: the function takes {len(required)} required parameters; a job takes "
            "none, or one `Run` parameter"
        )
    return len(params) >= 1 and params[0].kind not in (params[0].VAR_KEYWORD,)


def make_job(
    func: Callable[..., Any],
    *,
    cron: str,
    name: str | None,
    tz: str,
    lease: DurationLike | None,
    max_late: DurationLike | None,
    overlap: str | Overlap | None,
    attempts: int,
    heartbeat: DurationLike | None,
) -> JobSpec:
    """Validate every setting of a job, naming the job and the setting in the error."""
    job_name = check_name(name if name is not None else getattr(func, "__name__", ""))
    where = f"job {job_name!r}"
    if not callable(func):
        raise ConfigError(f"{where}: {func!r} is not callable")
    schedule = Schedule.parse(cron, tz)
    lease_ms = to_ms(lease, what=f"{where}: lease") if lease is not None else DEFAULT_LEASE_MS
    heartbeat_ms = (
        to_ms(heartbeat, what=f"{where}: heartbeat") if heartbeat is not None else lease_ms // 3
    )
    if heartbeat_ms >= lease_ms:
        raise ConfigError(
            f"{where}: heartbeat ({heartbeat_ms} ms) must be shorter than the lease ({lease_ms} ms); "
            f"the default is lease / 3 ({lease_ms // 3} ms)"
        )
    if heartbeat_ms < 10:
        raise ConfigError(f"{where}: heartbeat of {heartbeat_ms} ms is too short (at least 10 ms)")
    if max_late is not None:
        max_late_ms = to_ms(max_late, what=f"{where}: max_late", allow_zero=True)
    else:
        first = schedule.next_slot(0)
        max_late_ms = min(MAX_LATE_CAP_MS, schedule.next_slot(first) - first)
    if isinstance(attempts, bool) or not isinstance(attempts, int):
        raise ConfigError(f"{where}: attempts must be an int, got {attempts!r}")
    if not 1 <= attempts <= MAX_ATTEMPTS:
        raise ConfigError(f"{where}: attempts must be from 1 to {MAX_ATTEMPTS}, got {attempts}")
    try:
        overlap_value = None if overlap is None else Overlap(overlap)
    except ValueError:
        raise ConfigError(f"{where}: overlap must be 'skip' or 'allow', got {overlap!r}") from None
    return JobSpec(
        name=job_name,
        schedule=schedule,
        func=func,
        is_async=inspect.iscoroutinefunction(func),
        takes_run=_takes_run(func, job_name),
        lease_ms=lease_ms,
        heartbeat_ms=heartbeat_ms,
        max_late_ms=max_late_ms,
        overlap=overlap_value,
        attempts=attempts,
    )


def call_job(spec: JobSpec, run: Run) -> Any:
    return spec.func(run) if spec.takes_run else spec.func()
