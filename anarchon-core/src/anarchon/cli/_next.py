"""``anarchon next``: the coming slots of a cron expression, with what daylight saving does."""

from __future__ import annotations

import json
import time

import click
from rich.table import Table

from .._claims import MAX_SLOT_MS
from .._errors import ConfigError
from .._runtime.cron import EARLIEST_MS, Schedule
from . import configure_logging
from ._inspect import _console, _iso, parse_after

__all__ = ["next_slots"]


@click.command("next")
@click.argument("cron")
@click.option("--tz", default="UTC", show_default=True, help="IANA time zone of the schedule.")
@click.option(
    "--after", default=None, help="ISO 8601 start time, years 1000 to 9999 (default: now)."
)
@click.option("-n", "count", default=10, show_default=True, type=click.IntRange(1, 1000))
@click.option("--json", "as_json", is_flag=True, help="Print JSON instead of a table.")
@click.pass_context
def next_slots(
    ctx: click.Context, cron: str, tz: str, after: str | None, count: int, as_json: bool
) -> None:
    """Show the next slots of CRON (5 fields, or 6 with seconds first) as UTC and local times,
    with what daylight saving does to them. Slots end with the year 9999: after its last one
    there are none to show."""
    configure_logging(ctx, "WARNING")
    schedule = Schedule.parse(cron, tz)
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
