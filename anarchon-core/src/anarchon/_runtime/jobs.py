"""A job as the scheduler knows it: name, schedule, policy, function."""

from __future__ import annotations

import inspect
import logging
from collections.abc import Awaitable, Callable, Collection
from typing import Any

import attrs

from .._capabilities import Capabilities
from .._claims import MAX_ATTEMPTS, Overlap, parse_overlap
from .._durations import MAX_LATE_MS, MAX_LEASE_MS, DurationLike, to_ms
from .._errors import ConfigError, StoreUnavailable
from .._names import check_name, shown
from .._retries import Backoff, check_retries
from ..abc import ClaimStore, SupportsJobSetup
from .catch_up import DEFAULT_CATCH_UP, CatchUp, parse_catch_up
from .cron import Schedule
from .cron_fields import UTC_NAMES
from .handle import Run
from .interval import Interval, JobSchedule

log = logging.getLogger("anarchon.scheduler")

__all__ = ["JobFunction", "JobSpec", "call_job", "fit_to_store", "make_job", "parse_schedule"]

JobFunction = Callable[..., Any] | Callable[..., Awaitable[Any]]

DEFAULT_LEASE_MS = 60_000
MAX_LATE_CAP_MS = 60_000


@attrs.frozen(kw_only=True)
class JobSpec:
    name: str
    schedule: JobSchedule | None
    """A cron `Schedule` or an `Interval` (``every=``); None for `once()`, which has no
    schedule of its own."""
    func: Callable[..., Any]
    is_async: bool
    takes_run: bool
    lease_ms: int
    heartbeat_ms: int
    max_late_ms: int
    overlap: Overlap | None
    """None: `skip` where the store supports it, `allow` elsewhere."""
    attempts: int
    catch_up: CatchUp | None = None
    """What becomes of missed slots (T6); None: the scheduler's default."""
    timeout_ms: int | None = None
    """How long a run may take before it is fenced and recorded failed; None: no limit."""
    retries: int = 0
    """How many times a run that raised is tried again (L12); 0: never."""
    backoff: Backoff = attrs.field(factory=Backoff)
    """The wait before each retry."""

    @property
    def claim_attempts(self) -> int:
        """The attempts a claim of this job allows (L4): `attempts` for takeovers after
        crashes, plus `retries`, so that a retry never uses up the room a crash needs."""
        return self.attempts + self.retries


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
    cron: str | None,
    name: str | None,
    tz: str,
    lease: DurationLike | None,
    max_late: DurationLike | None,
    overlap: str | Overlap | None,
    attempts: int,
    heartbeat: DurationLike | None,
    catch_up: str | CatchUp | None = None,
    timeout: DurationLike | None = None,
    every: DurationLike | None = None,
    offset: DurationLike | None = None,
    retries: int = 0,
    backoff: object = None,
) -> JobSpec:
    """Validate every setting of a job, naming the job and the setting in the error."""
    job_name = check_name(name if name is not None else getattr(func, "__name__", ""))
    where = f"job {job_name!r}"
    if not callable(func):
        raise ConfigError(f"{where}: {func!r} is not callable")
    schedule = parse_schedule(where, cron=cron, tz=tz, every=every, offset=offset)
    lease_ms = (
        to_ms(lease, what=f"{where}: lease", most=MAX_LEASE_MS)
        if lease is not None
        else DEFAULT_LEASE_MS
    )
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
        max_late_ms = to_ms(max_late, what=f"{where}: max_late", allow_zero=True, most=MAX_LATE_MS)
    else:
        first = schedule.next_slot(0)
        max_late_ms = min(MAX_LATE_CAP_MS, schedule.next_slot(first) - first)
    if isinstance(attempts, bool) or not isinstance(attempts, int):
        raise ConfigError(f"{where}: attempts must be an int, got {attempts!r}")
    if not 1 <= attempts <= MAX_ATTEMPTS:
        raise ConfigError(f"{where}: attempts must be from 1 to {MAX_ATTEMPTS}, got {attempts}")
    overlap_value = None if overlap is None else parse_overlap(overlap, what=f"{where}: overlap")
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
        catch_up=None if catch_up is None else parse_catch_up(catch_up, where=where),
        timeout_ms=None if timeout is None else to_ms(timeout, what=f"{where}: timeout"),
        retries=check_retries(retries, where=where),
        backoff=Backoff() if backoff is None else Backoff.parse(backoff, where=where),
    )


def parse_schedule(
    where: str,
    *,
    cron: str | None,
    tz: str,
    every: DurationLike | None,
    offset: DurationLike | None,
) -> JobSchedule:
    """The job's schedule: a cron expression in zone `tz`, or ``every`` (plus ``offset``)
    aligned to the epoch; exactly one of `cron` and `every`."""
    if (cron is None) == (every is None):
        given = "both" if cron is not None else "neither"
        raise ConfigError(
            f"{where}: give exactly one of cron and every, got {given}: a cron expression "
            "like '*/5 * * * *' (slots on the wall clock of zone tz), or every='30s' (slots "
            "every 30 s from the Unix epoch, optionally shifted by offset='5s')"
        )
    if cron is not None:
        if offset is not None:
            raise ConfigError(
                f"{where}: offset={shown(offset)} applies to every= only; a cron expression "
                "sets its own seconds and minutes (e.g. '15 * * * *' is 15 minutes past each hour)"
            )
        return Schedule.parse(cron, tz)
    if tz not in UTC_NAMES:
        raise ConfigError(
            f"{where}: tz={shown(tz)} does not apply to every=: interval slots are aligned to "
            "the Unix epoch in UTC, with no daylight saving; remove tz, or use a cron "
            "expression to follow the wall clock of a zone"
        )
    assert every is not None
    return Interval.parse(every, offset, where=where)


def call_job(spec: JobSpec, run: Run) -> Any:
    return spec.func(run) if spec.takes_run else spec.func()


def fit_to_store(
    spec: JobSpec,
    caps: Capabilities,
    *,
    store_name: str,
    clock_skew_ms: int,
    catch_up: CatchUp = DEFAULT_CATCH_UP,
) -> JobSpec:
    """Check a job against its store at start: overlap ``skip`` needs leases, and the memory
    rule (T3): the store must remember a run for ``max_late + clock_skew`` (plus the lease
    horizon on lease stores). Returns the job with its overlap default resolved, and its
    catch-up default (the scheduler's `catch_up`)."""
    where = f"job {spec.name!r}"
    if spec.retries and not caps.retries:
        raise ConfigError(
            f"{where}: retries={spec.retries} needs a store that keeps a failed run for its "
            f"retry (rule L12); {store_name} does not. Set retries=0, or use a store that "
            "does (memory, sqlite, postgresql, redis strategy=lease)"
        )
    if spec.overlap is Overlap.SKIP and not caps.overlap:
        raise ConfigError(
            f"{where}: overlap='skip' needs a store with leases; {store_name} has none. "
            "Use overlap='allow', or a lease store (sqlite, postgresql, redis strategy=lease)"
        )
    if caps.remembers_ms is not None:
        horizon = spec.claim_attempts * spec.lease_ms if caps.leases else 0
        needed = spec.max_late_ms + clock_skew_ms + horizon
        if needed > caps.remembers_ms:
            safe = caps.remembers_ms - clock_skew_ms - horizon
            raise ConfigError(
                f"{where}: max_late ({spec.max_late_ms} ms) plus clock_skew "
                f"({clock_skew_ms} ms) is longer than {store_name} remembers "
                f"a run ({caps.remembers_ms} ms), so a late instance could run a forgotten slot "
                f"again (rule T3). Set max_late to at most {max(safe, 0)} ms, or make the store "
                f"remember at least {needed} ms"
            )
    if spec.overlap is None:
        spec = attrs.evolve(spec, overlap=Overlap.SKIP if caps.overlap else Overlap.ALLOW)
    if spec.catch_up is None:
        spec = attrs.evolve(spec, catch_up=catch_up)
    return spec


async def set_up_jobs(store: ClaimStore, jobs: Collection[str], *, store_name: str) -> None:
    """At a scheduler's start, let a `SupportsJobSetup` store set the jobs up. A `ConfigError`
    (this instance's options conflict with what the store holds) propagates: the scheduler
    refuses to start. A store error is logged: each job's first claim sets it up instead."""
    if not isinstance(store, SupportsJobSetup) or not jobs:
        return
    try:
        await store.setup_jobs(sorted(jobs))
    except StoreUnavailable as exc:
        log.warning(
            "store %s could not set up the jobs at start (%s); their first claims will",
            store_name,
            exc,
            extra={"store": store_name},
        )
