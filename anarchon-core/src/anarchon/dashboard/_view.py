"""What the dashboard shows, read from the store: plain values the templates render.

The reading is `anarchon status`'s (`read_snapshot`); this module only arranges it for a page:
a timeline per job, next slots in the job's zone, the instances seen, the last errors.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

import attrs

from .._claims import MAX_SLOT_MS, skip_kind
from .._control import Pause
from .._retries import retried
from .._runs import DamagedRun, RunRecord, RunStatus
from .._runtime.interval import JobSchedule
from .._urls import StoreURL, redact
from ..abc import ClaimStore, SupportsJobList, SupportsPause
from ..cli._inspect import DAMAGED, _iso, in_slot_order
from ..cli._status import Snapshot, read_snapshot

__all__ = [
    "LEGEND",
    "Cell",
    "DashboardView",
    "ErrorLine",
    "InstanceSeen",
    "JobView",
    "NextSlot",
    "PauseBadge",
    "build_view",
    "read_view",
]

# The window `anarchon status` counts outcomes over, per job.
_COUNT_WINDOW = 100
_NEXT_SLOTS = 3
_MAX_ERRORS = 20
_MAX_ERROR_CHARS = 2_000

TAKEN_OVER = "taken-over"
"""The mark of a run whose winner was taken over (attempt > 1), on top of its outcome colour."""

LEGEND: tuple[tuple[str, str, str], ...] = (
    ("succeeded", "succeeded", "the job returned"),
    ("failed", "failed", "the job raised; the error is below"),
    ("skipped", "skipped", "decided not to run: overlap, late or coalesced (reason on hover)"),
    ("interrupted", "interrupted", "the lease ran out with no attempts left"),
    ("running", "running", "a winner holds a live lease"),
    ("claimed", "claimed", "claimed on a store without leases: nothing more is known"),
    (TAKEN_OVER, "taken over", "attempt > 1: another instance took the run over (outlined)"),
    (DAMAGED, "damaged", "a stored record anarchon cannot read"),
)
"""(css class, label, meaning) of each mark a timeline cell can carry."""


@attrs.frozen(kw_only=True)
class Cell:
    """One slot of a job's timeline."""

    outcome: str
    """The css class: a `RunStatus` value, or ``damaged``."""
    taken_over: bool
    slot: str
    """The slot in UTC, ISO 8601."""
    title: str
    """Everything known about the run, one fact a line (the tooltip)."""
    mark: str
    """The few characters shown in the cell: the attempt of a takeover, the kind of a skip."""


@attrs.frozen(kw_only=True)
class NextSlot:
    utc: str
    local: str
    """Wall time in the job's zone with its abbreviation and offset."""
    note: str
    """What daylight saving does to it, or empty."""


@attrs.frozen(kw_only=True)
class PauseBadge:
    """A job's pause in force, as its badge shows it."""

    until: str
    """``until resumed`` or ``until 2026-01-01 10:00:00 UTC``."""
    by: str
    reason: str
    since: str


@attrs.frozen(kw_only=True)
class JobView:
    name: str
    schedule: str | None
    """``*/5 * * * * (Europe/Paris)``, ``every 30s`` or ``every 1h offset 15m``, or None: the
    schedule is unknown (no ``--app``)."""
    next_slots: tuple[NextSlot, ...]
    cells: tuple[Cell, ...]
    """Oldest slot first, so the timeline reads left to right."""
    counts: tuple[tuple[str, int], ...]
    counted: int
    pause: PauseBadge | None = None
    """Its pause in force (read with `SupportsPause.pauses`, which read-only stores allow)."""


@attrs.frozen(kw_only=True)
class InstanceSeen:
    name: str
    last_seen: str
    """The newest claim or finish time of its runs, UTC."""
    runs: int


@attrs.frozen(kw_only=True)
class MemberSeen:
    """A live member of the fleet (stores with a member list, M1)."""

    name: str
    last_heartbeat: str
    joined: str
    claims: int
    fallbacks: int
    wins: int


@attrs.frozen(kw_only=True)
class ErrorLine:
    job: str
    where: str
    """The slot (UTC), or the store's key of a damaged record."""
    kind: str
    """``failed`` or ``damaged``."""
    text: str


@attrs.frozen(kw_only=True)
class DashboardView:
    store: str
    """The store URL as anarchon shows it: credentials hidden."""
    now: str
    jobs: tuple[JobView, ...]
    instances: tuple[InstanceSeen, ...]
    errors: tuple[ErrorLine, ...]
    members: tuple[MemberSeen, ...] = ()
    """The live members, on stores with a member list; empty elsewhere."""
    keeps_members: bool = False
    """The store keeps a member list (`Capabilities.membership`), even if nobody is in it."""


def _utc(ms: int) -> str:
    return _iso(ms).replace("T", " ")


def _clip(text: str) -> str:
    text = redact(text)
    return text if len(text) <= _MAX_ERROR_CHARS else text[:_MAX_ERROR_CHARS] + " ..."


def _cell(record: RunRecord | DamagedRun) -> Cell:
    if isinstance(record, DamagedRun):
        where = _utc(record.slot) if record.slot is not None else redact(record.key)
        return Cell(
            outcome=DAMAGED,
            taken_over=False,
            slot=where,
            title=f"{where}\ndamaged: {_clip(record.problem)}",
            mark="!",
        )
    status = record.status
    lines = [_utc(record.slot), str(status)]
    mark = ""
    if status is RunStatus.SKIPPED:
        lines[-1] = f"skipped: {_clip(record.error or 'no reason recorded')}"
        mark = skip_kind(record.error)[:1]
    else:
        lines.append(f"attempt {record.attempt}, won by {record.holder}")
    taken_over = record.attempt > 1
    if taken_over:
        how = "tried again" if retried(record.error) else "taken over"
        lines.append(f"{how}: attempt {record.attempt}")
        mark = str(record.attempt)
    if record.finished_at is not None:
        lines.append(f"finished {_utc(record.finished_at)}")
    elif record.lease_until is not None and status is RunStatus.RUNNING:
        lines.append(f"lease until {_utc(record.lease_until)}")
    if status is RunStatus.FAILED and record.error:
        lines.append(f"error: {_clip(record.error)}")
    elif status is not RunStatus.SKIPPED and retried(record.error):
        lines.append(f"failed tries: {_clip(record.error or '')}")
    return Cell(
        outcome=status.value,
        taken_over=taken_over,
        slot=_utc(record.slot),
        title="\n".join(lines),
        mark=mark,
    )


def _next_slots(schedule: JobSchedule, now_ms: int) -> tuple[NextSlot, ...]:
    if now_ms >= MAX_SLOT_MS:
        return ()
    shown = []
    for info in schedule.upcoming(_NEXT_SLOTS, now_ms):
        offset = info.local.isoformat()[19:]
        shown.append(
            NextSlot(
                utc=_utc(info.slot_ms),
                local=f"{info.local:%Y-%m-%d %a %H:%M:%S} {info.local.tzname() or ''} ({offset})",
                note=info.dst_note,
            )
        )
    return tuple(shown)


def _instances(snapshot: Snapshot) -> tuple[InstanceSeen, ...]:
    seen: dict[str, tuple[int, int]] = {}
    for job in snapshot.jobs:
        for record in job.latest:
            times = (record.claimed_at, record.finished_at)
            when = max([record.slot, *(t for t in times if t is not None)])
            last, runs = seen.get(record.holder, (when, 0))
            seen[record.holder] = (max(last, when), runs + 1)
    ordered = sorted(seen.items(), key=lambda item: item[1][0], reverse=True)
    return tuple(
        InstanceSeen(name=name, last_seen=_utc(last), runs=runs) for name, (last, runs) in ordered
    )


def _errors(snapshot: Snapshot) -> tuple[ErrorLine, ...]:
    found: list[tuple[int, ErrorLine]] = []
    for job in snapshot.jobs:
        for damaged in job.damaged:
            where = _utc(damaged.slot) if damaged.slot is not None else redact(damaged.key)
            line = ErrorLine(job=job.job, where=where, kind=DAMAGED, text=_clip(damaged.problem))
            found.append((MAX_SLOT_MS + 1, line))  # damage first: it needs a person
        for record in job.latest:
            if record.status is RunStatus.FAILED:
                text = _clip(record.error or "no error text recorded")
                line = ErrorLine(job=job.job, where=_utc(record.slot), kind="failed", text=text)
                found.append((record.slot, line))
    found.sort(key=lambda item: item[0], reverse=True)
    return tuple(line for _, line in found[:_MAX_ERRORS])


def _badge(pause: Pause) -> PauseBadge:
    until = "until resumed" if pause.until_ms is None else f"until {_utc(pause.until_ms)}"
    return PauseBadge(
        until=until, by=pause.by, reason=redact(pause.reason), since=_utc(pause.since_ms)
    )


def build_view(
    snapshot: Snapshot,
    schedules: Mapping[str, JobSchedule],
    pauses: Sequence[Pause] = (),
    *,
    keeps_members: bool = False,
) -> DashboardView:
    """Arrange a `Snapshot` for the page; `schedules` are the jobs' schedules (cron or
    ``every``) known from ``--app``, `pauses` the pauses in force, `keeps_members` whether the
    store keeps a member list."""
    paused = {pause.job: pause for pause in pauses}
    jobs = []
    for job in snapshot.jobs:
        pause = paused.get(job.job)
        schedule = schedules.get(job.job)
        entries = in_slot_order(list(job.latest), list(job.damaged))
        jobs.append(
            JobView(
                name=job.job,
                schedule=None if schedule is None else schedule.text,
                next_slots=() if schedule is None else _next_slots(schedule, snapshot.now_ms),
                cells=tuple(_cell(entry) for entry in reversed(entries)),
                counts=tuple(job.counts.items()),
                counted=job.counted,
                pause=None if pause is None else _badge(pause),
            )
        )
    return DashboardView(
        store=snapshot.store,
        now=_utc(snapshot.now_ms),
        jobs=tuple(jobs),
        instances=_instances(snapshot),
        errors=_errors(snapshot),
        members=tuple(
            MemberSeen(
                name=m.instance,
                last_heartbeat=_utc(m.seen_ms),
                joined=_utc(m.started_ms),
                claims=m.stats.get("claims", 0),
                fallbacks=m.stats.get("fallbacks", 0),
                wins=m.stats.get("wins", 0),
            )
            for m in snapshot.members
        ),
        keeps_members=keeps_members,
    )


async def read_view(
    store: ClaimStore,
    url: StoreURL,
    *,
    jobs: Sequence[str],
    schedules: Mapping[str, JobSchedule],
    slots: int,
) -> DashboardView:
    """Read the store once and arrange it: the jobs named in `jobs` and in `schedules`, or, when
    both are empty, every job the store lists (`SupportsJobList`)."""
    names = list(dict.fromkeys([*jobs, *schedules]))
    if not jobs and isinstance(store, SupportsJobList):
        # The store's list adds jobs the app no longer has but whose runs are still remembered.
        names = list(dict.fromkeys([*names, *await store.jobs()]))
    snapshot = await read_snapshot(store, url, names, slots=slots, window=max(slots, _COUNT_WINDOW))
    pauses: list[Pause] = []
    if isinstance(store, SupportsPause) and store.capabilities.pause:
        pauses = await store.pauses()
    return build_view(snapshot, schedules, pauses, keeps_members=store.capabilities.membership)
