"""``anarchon status URL``: what the cluster decided, read from the store, live or once."""

from __future__ import annotations

import asyncio
import json
import time
from collections import Counter
from collections.abc import Sequence
from typing import Any

import attrs
import click
from rich.console import Group
from rich.live import Live
from rich.markup import escape
from rich.table import Table

from .._connect import connect
from .._control import Pause, is_triggered_slot
from .._durations import to_ms
from .._errors import AnarchonError, ConfigError, StoreCorrupt
from .._fleet import Member
from .._names import check_name
from .._runs import DamagedHistory, DamagedRun, RunRecord, RunStatus
from .._urls import StoreURL, redact
from ..abc import ClaimStore, SupportsJobList, SupportsMembership, SupportsPause
from . import configure_logging
from ._inspect import DAMAGED, _console, _iso, damaged_json, in_slot_order, slot_text

__all__ = ["JobStatus", "Snapshot", "damage_of", "read_snapshot", "status"]


@attrs.frozen(kw_only=True)
class JobStatus:
    """One job: its latest slots and how its recent runs ended."""

    job: str
    latest: tuple[RunRecord, ...]
    counts: dict[str, int]
    counted: int
    """How many recent runs `counts` covers."""
    damaged: tuple[DamagedRun, ...] = ()
    """Stored runs of the job that could not be read (`DamagedHistory`); a job whose runs
    could not be read at all has one, keyed by the job."""


@attrs.frozen(kw_only=True)
class Snapshot:
    store: str
    now_ms: int
    jobs: tuple[JobStatus, ...]
    pauses: tuple[Pause, ...] = ()
    """The pauses in force (P1), on stores that keep them."""
    members: tuple[Member, ...] = ()
    """The fleet's live members (M1), on stores that keep a member list."""
    members_error: str | None = None
    """Why the member list could not be read (a monitoring user without rights to it, say): the
    rest of the snapshot stands without it."""

    def pause_of(self, job: str) -> Pause | None:
        return next((p for p in self.pauses if p.job == job), None)


async def _job_names(store: ClaimStore, url: StoreURL, chosen: Sequence[str]) -> list[str]:
    if chosen:
        return list(chosen)
    if isinstance(store, SupportsJobList):
        return await store.jobs()
    raise ConfigError(
        f"{url.scheme}:// cannot list its jobs; name them with --job JOB (repeatable)"
    )


async def read_snapshot(
    store: ClaimStore, url: StoreURL, jobs: Sequence[str], *, slots: int, window: int
) -> Snapshot:
    """Read every job's latest `slots` runs, and count the statuses of its last `window`."""
    if not store.capabilities.history:
        raise ConfigError(f"store {url} keeps no run history ({url.scheme}:// has none)")
    names = await _job_names(store, url, jobs)
    pauses: list[Pause] = []
    if isinstance(store, SupportsPause) and store.capabilities.pause:
        pauses = [p for p in await store.pauses() if not jobs or p.job in jobs]
    members: list[Member] = []
    members_error = None
    if isinstance(store, SupportsMembership) and store.capabilities.membership:
        try:
            members = await store.members()
        except AnarchonError as exc:  # the list is an extra: the runs still show without it
            members_error = redact(str(exc))
    now = await store.now_ms()
    now_ms = now if now is not None else time.time_ns() // 1_000_000
    result = []
    for name in names:
        damaged: list[DamagedRun] = []
        try:
            records = await store.history(name, max(slots, window))
        except DamagedHistory as exc:
            records, damaged = exc.records, exc.damaged
        except StoreCorrupt as exc:  # nothing of the job could be read: the others still show
            records, damaged = [], [DamagedRun(job=name, key=f"job {name!r}", problem=str(exc))]
        counts = Counter(str(r.status) for r in records[:window])
        result.append(
            JobStatus(
                job=name,
                latest=tuple(records[:slots]),
                counts=dict(sorted(counts.items())),
                counted=min(len(records), window),
                damaged=tuple(damaged),
            )
        )
    return Snapshot(
        store=str(url),
        now_ms=now_ms,
        jobs=tuple(result),
        pauses=tuple(pauses),
        members=tuple(members),
        members_error=members_error,
    )


def damage_of(snapshot: Snapshot) -> StoreCorrupt | None:
    """The error a one-shot ``status`` exits with when some runs could not be read."""
    damaged = [d for job in snapshot.jobs for d in job.damaged]
    if not damaged:
        return None
    jobs = sorted({d.job for d in damaged})
    return StoreCorrupt(
        f"{len(damaged)} stored run(s) of job(s) {', '.join(jobs)} cannot be read (shown as "
        f"{DAMAGED}); the first: {damaged[0].problem}"
    )


def _lease_left(record: RunRecord, now_ms: int) -> int | None:
    if record.status is not RunStatus.RUNNING or record.lease_until is None:
        return None
    return record.lease_until - now_ms


def pause_json(pause: Pause) -> dict[str, Any]:
    return {
        "job": pause.job,
        "since": _iso(pause.since_ms),
        "until": _iso(pause.until_ms) or None,
        "until_ms": pause.until_ms,
        "reason": pause.reason,
        "by": pause.by,
    }


def pause_text(pause: Pause) -> str:
    """``paused since ... until ... by ...: reason``, plain text."""
    until = "resumed" if pause.until_ms is None else _iso(pause.until_ms)
    text = f"paused since {_iso(pause.since_ms)} until {until}"
    if pause.by:
        text += f" by {pause.by}"
    return text + (f": {pause.reason}" if pause.reason else "")


def member_json(member: Member) -> dict[str, Any]:
    return {
        "instance": member.instance,
        "last_heartbeat": _iso(member.seen_ms),
        "last_heartbeat_ms": member.seen_ms,
        "live_until_ms": member.until_ms,
        "joined": _iso(member.started_ms),
        "wins": member.stats.get("wins", 0),
        "stats": dict(member.stats),
    }


def snapshot_json(snapshot: Snapshot) -> dict[str, Any]:
    return {
        "store": snapshot.store,
        "now": _iso(snapshot.now_ms),
        "now_ms": snapshot.now_ms,
        "paused": [pause_json(p) for p in snapshot.pauses],
        "members": [member_json(m) for m in snapshot.members],
        "members_error": snapshot.members_error,
        "jobs": [
            {
                "job": job.job,
                "paused": None if (p := snapshot.pause_of(job.job)) is None else pause_json(p),
                "counts": job.counts,
                "counted_runs": job.counted,
                "latest": [
                    {
                        "slot": _iso(r.slot),
                        "slot_ms": r.slot,
                        "triggered": is_triggered_slot(r.slot),
                        "status": str(r.status),
                        "attempt": r.attempt,
                        "winner": r.holder,
                        "lease_remaining_ms": _lease_left(r, snapshot.now_ms),
                        "finished_at": _iso(r.finished_at) or None,
                        "error": redact(r.error) if r.error else None,
                    }
                    for r in job.latest
                ],
                "damaged": [damaged_json(d) for d in job.damaged],
            }
            for job in snapshot.jobs
        ],
    }


_STYLES = {"running": "yellow", "succeeded": "green", "failed": "red", "interrupted": "magenta"}


def render(snapshot: Snapshot) -> Group:
    """The rich view: one table for all jobs, newest slot first within each job."""
    table = Table(
        title=f"{snapshot.store} at {_iso(snapshot.now_ms)} (store clock)", title_justify="left"
    )
    for column in ("job", "slot (UTC)", "status", "attempt", "winner", "lease left", "recent"):
        table.add_column(column, overflow="fold")
    notes: list[str] = [
        f"[yellow]paused[/yellow] {escape(p.job)}: {escape(pause_text(p))}" for p in snapshot.pauses
    ]
    for job in snapshot.jobs:
        recent = ", ".join(f"{n} {s}" for s, n in job.counts.items()) or "no runs"
        if snapshot.pause_of(job.job) is not None:
            recent = f"[yellow]paused[/yellow]; {recent}"
        entries = in_slot_order(list(job.latest), list(job.damaged))
        if not entries:
            table.add_row(job.job, "", "", "", "", "", recent)
        for index, r in enumerate(entries):
            first, last = index == 0, index == len(entries) - 1
            if isinstance(r, DamagedRun):
                table.add_row(
                    job.job if first else "",
                    _iso(r.slot) or escape(redact(r.key)),
                    f"[red]{DAMAGED}[/red]",
                    "",
                    "",
                    "",
                    f"{recent} (last {job.counted})" if first else "",
                    end_section=last,
                )
                notes.append(
                    f"[red]{DAMAGED}[/red] {escape(job.job)} {escape(redact(r.key))}: "
                    + escape(redact(r.problem))
                )
                continue
            left = _lease_left(r, snapshot.now_ms)
            style = _STYLES.get(str(r.status), "")
            table.add_row(
                job.job if first else "",
                slot_text(r.slot),
                f"[{style}]{r.status}[/{style}]" if style else str(r.status),
                str(r.attempt),
                escape(r.holder),  # stored text: never read as rich markup
                "" if left is None else ("expired" if left < 0 else f"{left / 1000:.1f} s"),
                f"{recent} (last {job.counted})" if first else "",
                end_section=last,
            )
    parts: list[Any] = [table]
    if snapshot.members:
        parts.append(members_table(snapshot))
    if snapshot.members_error:
        parts.append(f"live instances not shown: {escape(snapshot.members_error)}")
    if notes:
        return Group(*parts, *notes)
    if not snapshot.jobs:
        parts.append("no jobs in this store yet")
    return Group(*parts)


def members_table(snapshot: Snapshot) -> Table:
    """The fleet's live members: last heartbeat, since when, and what each published."""
    table = Table(title=f"{len(snapshot.members)} live instance(s)", title_justify="left")
    for column in ("instance", "last heartbeat", "joined (UTC)", "claims", "fallbacks", "wins"):
        table.add_column(column, overflow="fold")
    for m in snapshot.members:
        ago = max(snapshot.now_ms - m.seen_ms, 0) / 1000
        table.add_row(
            escape(m.instance),  # stored text: never read as rich markup
            f"{ago:.1f} s ago",
            _iso(m.started_ms),
            str(m.stats.get("claims", "")),
            str(m.stats.get("fallbacks", "")),
            str(m.stats.get("wins", "")),
        )
    return table


@click.command()
@click.argument("url")
@click.option("--job", "jobs", multiple=True, help="Show this job (repeatable; default: all).")
@click.option("--once", is_flag=True, help="Print one snapshot and exit.")
@click.option("--json", "as_json", is_flag=True, help="Print one snapshot as JSON and exit.")
@click.option("--interval", default="2s", show_default=True, help="Refresh period of the view.")
@click.option("--slots", default=5, show_default=True, type=click.IntRange(1, 1000))
@click.option(
    "--window",
    default=100,
    show_default=True,
    type=click.IntRange(1, 100_000),
    help="How many recent runs per job the status counts cover.",
)
@click.pass_context
def status(
    ctx: click.Context,
    url: str,
    jobs: tuple[str, ...],
    once: bool,
    as_json: bool,
    interval: str,
    slots: int,
    window: int,
) -> None:
    """Show the jobs in the store at URL: their latest slots with winner, attempt and lease
    left, and how their recent runs ended, and the paused jobs (`anarchon pause`) with until
    when and why; on stores with a member list, the live instances with their last heartbeat
    and how many runs each won. Refreshes until Ctrl-C unless --once or --json.

    Times are UTC, by the store's clock. Passwords in URL are never printed. A stored run that
    cannot be read is shown with status "damaged", its key and what is wrong, among the others;
    with --once or --json the command then exits with code 4.

    The store is opened read-only: nothing is created or changed, and read rights are enough.
    A store that holds no anarchon data there is an error naming where it looked (exit 5).
    """
    configure_logging(ctx, "WARNING")
    parsed = StoreURL.parse(url)
    for job in jobs:
        check_name(job, what="job name")
    period_s = to_ms(interval, what="--interval") / 1000

    async def main() -> None:
        async with connect(parsed, read_only=True) as store:
            snapshot = await read_snapshot(store, parsed, jobs, slots=slots, window=window)
            console = _console()
            if as_json or once:
                if as_json:
                    click.echo(json.dumps(snapshot_json(snapshot), indent=2))
                else:
                    console.print(render(snapshot))
                damage = damage_of(snapshot)
                if damage is not None:
                    raise damage
                return
            with Live(render(snapshot), console=console, auto_refresh=False) as live:
                while True:
                    await asyncio.sleep(period_s)
                    snapshot = await read_snapshot(store, parsed, jobs, slots=slots, window=window)
                    live.update(render(snapshot), refresh=True)

    try:
        asyncio.run(main())
    except KeyboardInterrupt:
        return
