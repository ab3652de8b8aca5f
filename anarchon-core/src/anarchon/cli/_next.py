"""``anarchon next``: the coming slots of a cron expression, with what daylight saving does, or
of an interval (``--every 30s``)."""

from __future__ import annotations

import json
import time

import click
from rich.table import Table

from .._claims import MAX_SLOT_MS
from .._errors import ConfigError
from .._runtime.cron import EARLIEST_MS, Schedule
from .._runtime.cron_fields import UTC_NAMES
from .._runtime.interval import Interval, JobSchedule
from . import configure_logging
from ._inspect import _console, _iso, parse_after

__all__ = ["next_slots"]


@click.command("next")
@click.argument("cron", required=False)
@click.option(
    "--every",
    default=None,
    help="Instead of CRON: an interval of whole seconds (30s, 5m, 1h), slots aligned to the epoch.",
)
@click.option(
    "--offset", default=None, help="With --every: shift the slots within the interval (15m)."
)
@click.option("--tz", default="UTC", show_default=True, help="IANA time zone of a CRON schedule.")
@click.option(
    "--after", default=None, help="ISO 8601 start time, years 1000 to 9999 (default: now)."
)
@click.option("-n", "count", default=10, show_default=True, type=click.IntRange(1, 1000))
@click.option("--json", "as_json", is_flag=True, help="Print JSON instead of a table.")
@click.pass_context
def next_slots(
    ctx: click.Context,
    cron: str | None,
    every: str | None,
    offset: str | None,
    tz: str,
    after: str | None,
    count: int,
    as_json: bool,
) -> None:
    """Show the next slots of CRON (5 fields, or 6 with seconds first) as UTC and local times,
    with what daylight saving does to them; or, with --every instead of CRON, the slots of an
    interval (the job settings every= and offset=), in UTC. Slots end with the year
    9999: after its last one there are none to show."""
    configure_logging(ctx, "WARNING")
    schedule = _schedule(cron, every, offset, tz)
    after_ms = parse_after(after, tz) if after is not None else time.time_ns() // 1_000_000
    if after_ms < EARLIEST_MS:
        raise ConfigError(
            f"--after {after!r} is before the year 1000; write a time from the year 1000 to 9999"
        )
    # Past the last slot (the end of year 9999) the answer is no slots, or fewer than asked.
    infos = schedule.upcoming(count, after_ms) if after_ms < MAX_SLOT_MS else []
    if as_json:
        rows = [
            {
                "slot_ms": i.slot_ms,
                "utc": _iso(i.slot_ms),
                "local": i.local.isoformat(),
                "dst_note": i.dst_note or None,
            }
            for i in infos
        ]
        click.echo(json.dumps(rows, indent=2))
        return
    console = _console()
    end = "slots before the end of year 9999, the last time anarchon schedules"
    if not infos:
        console.print(f"{schedule.describe()}: no {end}")
        return
    table = Table(title=schedule.describe(), title_justify="left")
    table.add_column("#", justify="right")
    if isinstance(schedule, Interval):
        table.add_column("UTC")
        table.add_column("slot (epoch ms)", justify="right")
        for number, info in enumerate(infos, start=1):
            table.add_row(str(number), _iso(info.slot_ms), str(info.slot_ms))
        console.print(table)
        if len(infos) < count:
            console.print(f"no more {end}")
        return
    table.add_column("UTC")
    table.add_column(f"local ({tz})")
    table.add_column("daylight saving", overflow="fold")
    for number, info in enumerate(infos, start=1):
        offset = info.local.isoformat()[19:]
        local = f"{info.local:%Y-%m-%d %a %H:%M:%S} {info.local.tzname() or ''} ({offset})"
        table.add_row(str(number), _iso(info.slot_ms), local, info.dst_note)
    console.print(table)
    if len(infos) < count:
        console.print(f"no more {end}")


def _schedule(cron: str | None, every: str | None, offset: str | None, tz: str) -> JobSchedule:
    """CRON in --tz, or --every with --offset: exactly one of CRON and --every."""
    if (cron is None) == (every is None):
        given = "both" if cron is not None else "neither"
        raise ConfigError(
            f"give one of CRON and --every, got {given}: anarchon next '*/5 * * * *' "
            "[--tz ZONE], or anarchon next --every 30s [--offset 5s]"
        )
    if cron is not None:
        if offset is not None:
            raise ConfigError(
                "--offset applies to --every only; a cron expression sets its own seconds and "
                "minutes (e.g. '15 * * * *' is 15 minutes past each hour)"
            )
        return Schedule.parse(cron, tz)
    if tz not in UTC_NAMES:
        raise ConfigError(
            f"--tz {tz!r} does not apply to --every: interval slots are aligned to the Unix "
            "epoch in UTC, with no daylight saving; leave out --tz (and give --after in UTC or "
            "with an offset)"
        )
    assert every is not None
    return Interval.parse(every, offset, names=("--every", "--offset"))
