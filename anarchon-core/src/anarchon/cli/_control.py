"""``anarchon pause``, ``resume`` and ``trigger``: control a job for the whole fleet through the
store (P1, X1). They write to the store, so they open it normally (not read-only)."""

from __future__ import annotations

import asyncio
import getpass
import socket
import time

import click

from .._connect import connect, create_store
from .._control import MAX_CONTROL_TEXT, Trigger
from .._durations import to_ms
from .._errors import ConfigError
from .._names import check_name, printable_host
from .._runs import RunRecord, RunStatus
from .._urls import StoreURL
from ..abc import ClaimStore, SupportsPause, SupportsTrigger
from . import UnexpectedError, configure_logging
from ._inspect import _iso, parse_after

__all__ = ["by_whom", "pause", "resume", "trigger"]

_PAUSE_BACKENDS = "memory://, sqlite://, postgresql:// and redis:// (strategy=lease or script)"
_TRIGGER_BACKENDS = _PAUSE_BACKENDS
_WAIT_DEFAULT_S = 60.0
_WAIT_POLL_S = 0.25
_WAIT_HISTORY = 200
"""Runs read per poll of ``--wait``: the triggered slot is among the job's newest."""


def by_whom() -> str:
    """``user@host`` for the `by` of a pause or trigger: printable, at most `MAX_CONTROL_TEXT`."""
    try:
        user = getpass.getuser()
    except (KeyError, OSError):  # no user name in the environment or the password database
        user = "unknown"
    text = f"{printable_host(user)}@{printable_host(socket.gethostname())}"
    return text[:MAX_CONTROL_TEXT]


def _pausable(store: ClaimStore, url: StoreURL) -> SupportsPause:
    if isinstance(store, SupportsPause) and store.capabilities.pause:
        return store
    raise ConfigError(
        f"store {url} cannot pause jobs: a pause must be checked inside the claim's atomic step "
        f"(P1), which {_PAUSE_BACKENDS} do; {url.scheme}:// with these options does not"
    )


def _triggerable(store: ClaimStore, url: StoreURL) -> SupportsTrigger:
    if isinstance(store, SupportsTrigger) and store.capabilities.trigger:
        return store
    raise ConfigError(
        f"store {url} cannot trigger runs: a trigger must be listed to every instance and its "
        f"ad-hoc slot claimed like any slot (X1), which {_TRIGGER_BACKENDS} do; {url.scheme}:// "
        "with these options does not"
    )


def parse_until(text: str, now_ms: int) -> int:
    """``--until``: a duration from now (``30m``, ``2h``) or an ISO 8601 time (UTC unless it has
    an offset); epoch ms, after `now_ms`."""
    if text.strip()[:1].isdigit() and not any(c in text for c in "-:T"):
        until = now_ms + to_ms(text, what="--until")
    else:
        until = parse_after(text, "UTC", option="--until")
    if until <= now_ms:
        raise ConfigError(
            f"--until {text!r} is {_iso(until)}, not in the future (the store's time is "
            f"{_iso(now_ms)}); give a later time or a duration such as 2h"
        )
    return until


def _check_text(value: str, option: str) -> str:
    if len(value) > MAX_CONTROL_TEXT or not value.isprintable():
        raise ConfigError(
            f"{option} must be printable text of at most {MAX_CONTROL_TEXT} characters "
            f"(no line breaks), got {len(value)} characters"
        )
    return value


async def _now(store: ClaimStore) -> int:
    now = await store.now_ms()
    return now if now is not None else time.time_ns() // 1_000_000


@click.command()
@click.argument("url")
@click.argument("job")
@click.option(
    "--until",
    default=None,
    help="End the pause by itself: a duration from now (30m, 2h) or an ISO 8601 time (UTC "
    "unless it has an offset). Default: until `anarchon resume`.",
)
@click.option("--reason", default="", help="Why; recorded with every skip (paused: REASON).")
@click.pass_context
def pause(ctx: click.Context, url: str, job: str, until: str | None, reason: str) -> None:
    """Pause JOB for every instance: from now on, the claims of its slots are decided
    "skipped: paused" by the store itself (rule P1), whatever each instance believes. Runs
    already going are not stopped. Replaces an earlier pause of the job.

    Stores that can: memory://, sqlite://, postgresql://, redis:// (strategy=lease or script).
    """
    configure_logging(ctx, "WARNING")
    parsed = StoreURL.parse(url)
    check_name(job, what="job name")
    _check_text(reason, "--reason")

    async def main() -> str:
        _pausable(create_store(parsed), parsed)  # before anything is opened or created
        async with connect(parsed) as store:
            pausable = _pausable(store, parsed)
            until_ms = None if until is None else parse_until(until, await _now(store))
            done = await pausable.pause(job, until_ms=until_ms, reason=reason, by=by_whom())
        end = "until resumed" if done.until_ms is None else f"until {_iso(done.until_ms)}"
        why = f" ({done.reason})" if done.reason else ""
        return f"paused job {job!r} in {parsed} {end}{why}; its slots are skipped meanwhile"

    click.echo(asyncio.run(main()))


@click.command()
@click.argument("url")
@click.argument("job")
@click.pass_context
def resume(ctx: click.Context, url: str, job: str) -> None:
    """End the pause of JOB: its next slots are claimed and run again. Slots skipped while it
    was paused stay skipped. A job that was not paused is left as it is (exit 0)."""
    configure_logging(ctx, "WARNING")
    parsed = StoreURL.parse(url)
    check_name(job, what="job name")

    async def main() -> bool:
        _pausable(create_store(parsed), parsed)
        async with connect(parsed) as store:
            return await _pausable(store, parsed).resume(job)

    if asyncio.run(main()):
        click.echo(f"resumed job {job!r} in {parsed}")
    else:
        click.echo(f"job {job!r} was not paused in {parsed}; nothing to do")


@click.command()
@click.argument("url")
@click.argument("job")
@click.option("--reason", default="", help="Why; shown in the logs of the instances.")
@click.option(
    "--wait",
    "wait_s",
    type=click.FloatRange(0, 86_400, min_open=True),
    metavar="[SECONDS]",
    is_flag=False,
    flag_value=str(_WAIT_DEFAULT_S),
    default=None,
    help="Wait until the triggered run is decided (at most SECONDS, default "
    f"{_WAIT_DEFAULT_S:.0f}); print who ran it and how it ended; exit 1 unless it succeeded "
    "(on a store without leases: until it is claimed).",
)
@click.pass_context
def trigger(ctx: click.Context, url: str, job: str, reason: str, wait_s: float | None) -> None:
    """Run JOB now, once (rule X1): the trigger is written to the store, every running
    instance that has JOB finds it within its trigger_poll (default 2 s) and claims it, and
    exactly one wins and runs it, with the usual lease, backups and fencing. Its slot is the
    store's time of the trigger (never on a whole second); history marks it "triggered".

    Stores that can: memory://, sqlite://, postgresql://, redis:// (strategy=lease or
    script; script keeps no lease: no backup takes a crashed run over).
    """
    configure_logging(ctx, "WARNING")
    parsed = StoreURL.parse(url)
    check_name(job, what="job name")
    _check_text(reason, "--reason")

    async def main() -> RunRecord | None:
        _triggerable(create_store(parsed), parsed)
        async with connect(parsed) as store:
            made = await _triggerable(store, parsed).trigger(job, reason=reason, by=by_whom())
            click.echo(f"triggered job {job!r} in {parsed}: slot {made.slot} ({_iso(made.slot)})")
            if wait_s is None:
                return None
            return await _wait_for(store, made, wait_s)

    record = asyncio.run(main())
    if wait_s is None:
        return
    if record is None:
        raise UnexpectedError(
            f"the triggered run of job {job!r} was not decided within {wait_s:g} s: is an "
            "instance with this job running, on this store and prefix, with trigger_poll on?"
        )
    ending = _describe(record)
    click.echo(ending)
    if record.status not in (RunStatus.SUCCEEDED, RunStatus.CLAIMED):
        raise UnexpectedError(f"the triggered run of job {job!r} did not succeed: {ending}")


async def _wait_for(store: ClaimStore, made: Trigger, wait_s: float) -> RunRecord | None:
    """Poll the job's history until the triggered slot's run is finished (or skipped)."""
    deadline = time.monotonic() + wait_s
    while True:
        runs = await store.history(made.job, _WAIT_HISTORY)
        record = next((r for r in runs if r.slot == made.slot), None)
        # A store without leases records only who claimed the run, never how it ended.
        if record is not None and (record.status.finished or record.status is RunStatus.CLAIMED):
            return record
        if time.monotonic() >= deadline:
            return None
        await asyncio.sleep(_WAIT_POLL_S)


def _describe(record: RunRecord) -> str:
    if record.status is RunStatus.SKIPPED:
        return f"skipped: {record.error or 'no reason recorded'}"
    if record.status is RunStatus.CLAIMED:
        return f"claimed by {record.holder}; this store records no result of its runs"
    text = f"{record.status} on {record.holder} (attempt {record.attempt})"
    if record.finished_at is not None and record.claimed_at is not None:
        text += f" in {(record.finished_at - record.claimed_at) / 1000:.1f} s"
    if record.error:
        text += f": {record.error}"
    return text
