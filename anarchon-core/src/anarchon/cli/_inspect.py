"""``anarchon backends`` and ``anarchon history URL JOB`` (``anarchon next`` is in `_next`)."""

from __future__ import annotations

import asyncio
import json
import sys
import time
from datetime import datetime, timedelta, timezone
from typing import Any
from zoneinfo import ZoneInfo

import click
from rich.console import Console
from rich.markup import escape
from rich.table import Table

from .._capabilities import Capabilities
from .._connect import connect, create_store
from .._control import is_triggered_slot
from .._durations import to_ms
from .._errors import ConfigError
from .._names import check_name
from .._retries import TRY_SEPARATOR
from .._runs import DamagedHistory, DamagedRun, RunRecord, RunStatus
from .._urls import StoreURL, redact
from ..plugins import BackendInfo, plugin_manager
from . import configure_logging

__all__ = [
    "DAMAGED",
    "backends",
    "damaged_json",
    "history",
    "in_slot_order",
    "parse_after",
    "parse_since",
    "slot_text",
]

# URLs that build a store without a server, to read its default capabilities (never opened).
_SAMPLE_URLS = {"memory": "memory://", "sqlite": "sqlite:///anarchon.db"}


def _console() -> Console:
    # Off a terminal (pipes, CI logs) tables are not squeezed into 80 columns.
    return Console(highlight=False, width=None if sys.stdout.isatty() else 200)


def _iso(ms: int | None) -> str:
    if ms is None:
        return ""
    try:
        when = datetime.fromtimestamp(ms / 1000, timezone.utc)
    except (ValueError, OverflowError, OSError):  # a stored time no date can show
        return f"{ms} ms"
    text = when.isoformat(timespec="milliseconds").replace("+00:00", "Z")
    return text.replace(".000Z", "Z")


# -- backends ---------------------------------------------------------------------------------


def _capabilities(info: BackendInfo) -> Capabilities | None:
    """Default capabilities of backends that need no server to be built; None for the others."""
    url = _SAMPLE_URLS.get(info.scheme)
    if url is None:
        return None
    try:
        return create_store(url).capabilities
    except Exception:  # noqa: BLE001 - a listing must not fail because one backend is odd
        return None


def _describe(caps: Capabilities | None) -> str:
    if caps is None:
        return "(see its docs; depends on the server and options)"
    flags = [
        name.replace("_", "-")
        for name in ("leases", "self_recognition", "fencing", "overlap", "history", "store_clock")
        if getattr(caps, name)
    ]
    if caps.batch:
        flags.append("batch")
    remembers = "forever" if caps.remembers_ms is None else f"{caps.remembers_ms} ms"
    return f"{' '.join(flags)}; remembers runs {remembers}"


@click.command()
@click.option("--json", "as_json", is_flag=True, help="Print JSON instead of a table.")
@click.pass_context
def backends(ctx: click.Context, as_json: bool) -> None:
    """List installed backends (by URL scheme) and plugins that failed to load."""
    configure_logging(ctx, "WARNING")
    manager = plugin_manager()
    infos = manager.backends()
    caps = {info.scheme: _capabilities(info) for info in infos}
    if as_json:
        data: dict[str, Any] = {
            "backends": [
                {
                    "scheme": info.scheme,
                    "plugin": info.plugin,
                    "target": info.target,
                    "description": info.description,
                    "capabilities": None
                    if caps[info.scheme] is None
                    else _caps_json(caps[info.scheme]),
                }
                for info in infos
            ],
            "failed": dict(sorted(manager.failed.items())),
        }
        click.echo(json.dumps(data, indent=2))
        return
    table = Table(title="installed anarchon backends", title_justify="left")
    for column in ("scheme", "plugin", "class", "description", "capabilities"):
        table.add_column(column, overflow="fold")
    for info in infos:
        table.add_row(
            f"{info.scheme}://",
            info.plugin,
            info.target,
            info.description,
            _describe(caps[info.scheme]),
        )
    console = _console()
    console.print(table)
    for name, reason in sorted(manager.failed.items()):
        console.print(f"[red]plugin {name!r} failed to load:[/red] {redact(reason)}", markup=True)


def _caps_json(caps: Capabilities | None) -> dict[str, Any] | None:
    if caps is None:
        return None
    import attrs

    return attrs.asdict(caps)


# -- history ----------------------------------------------------------------------------------


# With a filter, this many runs are read and then filtered (stores keep 1000 per job by default).
_FILTER_WINDOW = 100_000
_STATUSES = [s.value for s in RunStatus]


def parse_since(text: str, now_ms: int) -> int:
    """``--since``: a duration back from now (``90m``, ``1h``, ``2d``) or an ISO 8601 time (UTC
    unless it has an offset); epoch ms."""
    if text.strip()[:1].isdigit() and not any(c in text for c in "-:T"):
        return now_ms - to_ms(text, what="--since")
    return parse_after(text, "UTC", option="--since")


async def _read_history(
    url: StoreURL, job: str, limit: int
) -> tuple[list[RunRecord], DamagedHistory | None]:
    """The runs that could be read, and what says which could not (`DamagedHistory`). The
    store is opened read-only (R1): a typo in the URL leaves nothing behind."""
    async with connect(url, read_only=True) as store:
        if not store.capabilities.history:
            raise ConfigError(f"store {url} keeps no run history ({url.scheme}:// has none)")
        try:
            return await store.history(job, limit), None
        except DamagedHistory as damaged:
            return damaged.records, damaged


def _record_json(record: RunRecord) -> dict[str, Any]:
    return {
        "job": record.job,
        "slot": _iso(record.slot),
        "slot_ms": record.slot,
        "triggered": is_triggered_slot(record.slot),
        "status": str(record.status),
        "attempt": record.attempt,
        "holder": record.holder,
        "claimed_at": _iso(record.claimed_at) or None,
        "lease_until": _iso(record.lease_until) or None,
        "finished_at": _iso(record.finished_at) or None,
        "error": record.error,
    }


def slot_text(slot: int) -> str:
    """A slot as history and status show it: its time, and ``triggered`` for an ad-hoc one (X1)."""
    return f"{_iso(slot)} triggered" if is_triggered_slot(slot) else _iso(slot)


DAMAGED = "damaged"
"""The status `history` and `status` show for a stored run they cannot read."""


def damaged_json(run: DamagedRun) -> dict[str, Any]:
    """A run that could not be read, as the JSON of `history` and `status` shows it: status
    ``damaged``, the store's name for it as `key`, what is wrong as `error`."""
    return {
        "job": run.job,
        "slot": _iso(run.slot) or None,
        "slot_ms": run.slot,
        "status": DAMAGED,
        "key": redact(run.key),
        "error": redact(run.problem),
    }


def in_slot_order(
    records: list[RunRecord], damaged: list[DamagedRun]
) -> list[RunRecord | DamagedRun]:
    """Newest slot first; damaged runs whose slot is unknown come first, where they show."""
    entries: list[RunRecord | DamagedRun] = [*records, *damaged]
    return sorted(entries, key=lambda e: (e.slot is None, e.slot or 0), reverse=True)


@click.command()
@click.argument("url")
@click.argument("job")
@click.option("--limit", default=20, show_default=True, type=click.IntRange(1, 100_000))
@click.option(
    "--since",
    default=None,
    help="Only slots since this: a duration back from now (1h, 90m, 2d) or an ISO 8601 time.",
)
@click.option(
    "--status",
    "--outcome",
    "statuses",
    multiple=True,
    type=click.Choice(_STATUSES, case_sensitive=False),
    help="Only runs with this status (repeatable).",
)
@click.option("--json", "as_json", is_flag=True, help="Print JSON instead of a table.")
@click.pass_context
def history(
    ctx: click.Context,
    url: str,
    job: str,
    limit: int,
    since: str | None,
    statuses: tuple[str, ...],
    as_json: bool,
) -> None:
    """Show the runs of JOB in the store at URL, newest first.

    Times are UTC; a run asked for with `anarchon trigger` is marked "triggered" (JSON:
    "triggered": true). Passwords in URL are never printed. A stored run that cannot be read is
    shown with status "damaged", its key and what is wrong, whatever the filters, among the
    others; the command then exits with code 4.

    The store is opened read-only: nothing is created or changed, and read rights are enough.
    A store that holds no anarchon data there is an error naming where it looked (exit 5).
    """
    configure_logging(ctx, "WARNING")
    parsed = StoreURL.parse(url)
    check_name(job, what="job name")
    since_ms = None if since is None else parse_since(since, int(time.time() * 1000))
    filtered = since_ms is not None or bool(statuses)
    records, damage = asyncio.run(_read_history(parsed, job, _FILTER_WINDOW if filtered else limit))
    wanted = {s.lower() for s in statuses}
    records = [
        r
        for r in records
        if (since_ms is None or r.slot >= since_ms) and (not wanted or r.status.value in wanted)
    ][:limit]
    damaged = [
        d
        for d in (damage.damaged if damage is not None else [])
        if since_ms is None or d.slot is None or d.slot >= since_ms
    ]
    entries = in_slot_order(records, damaged)
    if as_json:
        click.echo(
            json.dumps(
                [_record_json(e) if isinstance(e, RunRecord) else damaged_json(e) for e in entries],
                indent=2,
            )
        )
    else:
        _print_history(job, parsed, entries)
    if damage is not None:
        raise damage


def _print_history(job: str, url: StoreURL, entries: list[RunRecord | DamagedRun]) -> None:
    console = _console()
    if not entries:
        console.print(f"no runs of job {job!r} in {url}")
        return
    table = Table(title=f"runs of {job!r} in {url}, newest first", title_justify="left")
    for column in ("slot (UTC)", "status", "attempt", "holder", "claimed", "finished", "error"):
        table.add_column(column, overflow="fold")
    for entry in entries:
        if isinstance(entry, DamagedRun):
            table.add_row(
                _iso(entry.slot) or escape(redact(entry.key)),
                f"[red]{DAMAGED}[/red]",
                "",
                "",
                "",
                "",
                escape(redact(entry.problem)),
            )
            continue
        table.add_row(
            slot_text(entry.slot),
            str(entry.status),
            str(entry.attempt),
            escape(entry.holder),  # stored text: never read as rich markup
            _iso(entry.claimed_at),
            _iso(entry.finished_at),
            # A try log (L12) shows one try per line.
            escape(redact(entry.error or "")).replace(TRY_SEPARATOR, "\n"),
        )
    console.print(table)


# -- next -------------------------------------------------------------------------------------


def parse_after(text: str, tz: str, *, option: str = "--after") -> int:
    """An ISO 8601 time in epoch ms; without an offset it is a wall time in zone `tz`. `option`
    names the command-line option in the error."""
    cleaned = text.strip()
    if cleaned.endswith(("Z", "z")):
        cleaned = cleaned[:-1] + "+00:00"
    try:
        when = datetime.fromisoformat(cleaned)
    except ValueError:
        raise ConfigError(
            f"{option} {text!r} is not an ISO 8601 time; write for example 2025-03-30T01:30"
            + (" (in --tz)" if option == "--after" else " (UTC)")
            + " or 2025-03-30T01:30:00+02:00 or 2025-03-30T00:00Z"
            + (", or a duration back from now such as 90m or 2d" if option == "--since" else "")
        ) from None
    if when.tzinfo is None:
        when = when.replace(tzinfo=ZoneInfo(tz))
    try:
        return (when - _EPOCH) // timedelta(milliseconds=1)
    except OverflowError:  # a time in year 1 or 9999 whose offset moves it out of range
        raise ConfigError(
            f"{option} {text!r} is out of range; write a time from the year 1000 to 9999"
        ) from None


_EPOCH = datetime(1970, 1, 1, tzinfo=timezone.utc)
