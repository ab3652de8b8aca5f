"""``anarchon demo``: several local instances share one SQLite file; watch the store pick one
winner per slot, then see a backup take over from an instance killed with SIGKILL."""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import signal
import subprocess
import sys
import tempfile
import time
from collections import Counter
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import IO
from urllib.parse import quote

import click
from rich.console import Console
from rich.live import Live

from .._connect import connect
from .._runs import RunStatus
from ..abc import ClaimStore
from . import CliError, UnexpectedError, configure_logging
from ._demo_job import (
    DEMO_JOB,
    DEMO_PREFIX,
    GRACE_MS,
    HEARTBEAT_MS,
    JOB_SECONDS,
    LEASE_MS,
    MAX_LATE_MS,
)
from ._demo_view import DemoState, Instance, PlainPrinter, clock, render, summary

__all__ = ["demo"]

POLL_S = 0.25
KILL_FRESH_MS = 700
"""Kill a winner only this soon after its claim, so it dies mid-run, well before it finishes."""
TAKEOVER_WAIT_S = (LEASE_MS + 2 * HEARTBEAT_MS) / 1000 + JOB_SECONDS + 2
"""After the time is up, how long to wait for a takeover that is still due."""


def _now_ms() -> int:
    return time.time_ns() // 1_000_000


def _worker_env() -> dict[str, str]:
    # The user's ANARCHON_* settings (instance, prefix, store) must not leak into the demo.
    return {
        k: v
        for k, v in os.environ.items()
        if not k.startswith("ANARCHON_") or k == "ANARCHON_DISABLED_PLUGINS"
    }


class Demo:
    def __init__(
        self, *, db: Path, count: int, duration: int, console: Console, live: bool
    ) -> None:
        self.db = db
        self.url = f"sqlite:///{quote(str(db))}?prefix={DEMO_PREFIX}"
        self.journal = db.with_name(db.name + ".journal")
        self.log_path = db.with_name(db.name + ".log")
        self.count = count
        self.duration = duration
        self.console = console
        self.live = live
        self.kill_at = max(2.0, duration * 0.4)
        self.state = DemoState(db_path=str(db), instances=[])
        self.printer = PlainPrinter()
        self.events: list[str] = []
        self.intro = (
            f"{count} instance(s) share {db}. Each schedules job {DEMO_JOB!r} every second and "
            f"claims every slot; one atomic claim in SQLite picks the single winner. The job takes "
            f"{JOB_SECONDS} s, longer than its interval, so runs overlap (overlap='allow') and "
            f"each winner renews its {LEASE_MS // 1000} s lease every {HEARTBEAT_MS // 1000} s."
        )
        self.started_ms = 0
        self._log: IO[bytes] | None = None
        self._no_kill_said = False

    # -- output -----------------------------------------------------------------------------
    def say(self, event: str) -> None:
        """An event: printed at once in plain mode, shown under the intro in the live view."""
        self.events = [*self.events[-2:], event]
        self.state.status = "\n".join([self.intro, "", *self.events])
        if not self.live:
            self.console.print(event)

    @contextlib.contextmanager
    def view(self) -> Iterator[Callable[[], None]]:
        if not self.live:
            self.console.print(self.intro)

            def print_lines() -> None:
                for line in self.printer.lines(self.state):
                    self.console.print(line)

            yield print_lines
            return
        with Live(render(self.state), console=self.console, refresh_per_second=8) as live:
            yield lambda: live.update(render(self.state))

    # -- processes --------------------------------------------------------------------------
    def spawn(self) -> None:
        self._log = open(self.log_path, "ab")  # noqa: SIM115 - closed in stop_all
        for number in range(1, self.count + 1):
            name = f"instance-{number}"
            process = subprocess.Popen(
                [
                    sys.executable,
                    "-m",
                    "anarchon.cli._demo_worker",
                    self.url,
                    name,
                    str(self.journal),
                ],
                cwd=self.db.parent,
                env=_worker_env(),
                stdin=subprocess.DEVNULL,
                stdout=self._log,
                stderr=subprocess.STDOUT,
                start_new_session=True,  # Ctrl-C reaches the demo, which stops them in order
            )
            self.state.instances.append(Instance(name=name, process=process))

    def stop_all(self, timeout: float = 5.0) -> None:
        """SIGTERM every live instance, SIGKILL those still up after `timeout`. Idempotent."""
        alive = [i for i in self.state.instances if i.alive]
        for instance in alive:
            with contextlib.suppress(ProcessLookupError):
                instance.process.send_signal(signal.SIGTERM)
        deadline = time.monotonic() + timeout
        for instance in alive:
            try:
                instance.process.wait(max(0.0, deadline - time.monotonic()))
            except subprocess.TimeoutExpired:
                instance.process.kill()
                instance.process.wait()
        if self._log is not None:
            self._log.close()
            self._log = None

    async def stop_workers(self) -> None:
        self.say(
            f"time is up: SIGTERM to every instance; each stops claiming, lets its running job "
            f"finish (grace {GRACE_MS // 1000} s) and exits"
        )
        await asyncio.to_thread(self.stop_all, GRACE_MS / 1000 + 5)

    def _log_tail(self) -> str:
        try:
            lines = self.log_path.read_text(encoding="utf-8", errors="replace").splitlines()
        except OSError:
            return ""
        return lines[-1] if lines else ""

    # -- the store's view -------------------------------------------------------------------
    async def poll(self, store: ClaimStore) -> None:
        records = await store.history(DEMO_JOB, 1000)
        counts = Counter(r.slot for r in records)
        self.state.history_duplicates = sum(1 for n in counts.values() if n > 1)
        self.state.records = {
            r.slot: r
            for r in records
            if r.slot >= self.started_ms - MAX_LATE_MS
            and (r.claimed_at is None or r.claimed_at >= self.started_ms)
        }
        for record in sorted(self.state.records.values(), key=lambda r: r.slot):
            if record.attempt > 1 and record.slot not in self.state.takeovers:
                self.state.takeovers[record.slot] = time.monotonic()
                if self.live:
                    self.say(self.state.takeover_line(record))

    def maybe_kill(self, elapsed: float) -> None:
        state = self.state
        if state.kill_time is not None or elapsed < self.kill_at or elapsed >= self.duration:
            return
        alive = {i.name: i for i in state.instances if i.alive}
        if len(alive) < 2:
            if not self._no_kill_said:
                self._no_kill_said = True
                self.say("only one instance is up: no takeover to show (try --instances 3)")
            return
        now = _now_ms()
        fresh = [
            r
            for r in state.records.values()
            if r.status is RunStatus.RUNNING
            and r.attempt == 1
            and r.holder in alive
            and r.claimed_at is not None
            and now - r.claimed_at < KILL_FRESH_MS
        ]
        if not fresh:
            return
        target = max(fresh, key=lambda r: r.slot)
        victim = alive[target.holder]
        victim.process.kill()
        victim.killed = True
        state.kill_time = time.monotonic()
        state.killed_slots = {
            r.slot: victim.name
            for r in state.records.values()
            if r.holder == victim.name and r.status is RunStatus.RUNNING
        }
        self.say(
            f"kill -9 {victim.name} (pid {victim.process.pid}) in the middle of slot "
            f"{clock(target.slot)}. Nobody renews its lease now; the other instances check "
            f"every {HEARTBEAT_MS // 1000} s and one takes the run over as attempt 2 once the "
            f"lease runs out (within {LEASE_MS // 1000} s)."
        )

    def _pending_takeovers(self) -> list[int]:
        return [
            slot
            for slot in self.state.killed_slots
            if slot not in self.state.records or not self.state.records[slot].status.finished
        ]

    def _journal_counts(self) -> Counter[int]:
        counts: Counter[int] = Counter()
        with contextlib.suppress(FileNotFoundError):
            for line in self.journal.read_text(encoding="utf-8").splitlines():
                slot = json.loads(line)["slot"]
                if slot in self.state.records:
                    counts[slot] += 1
        return counts

    # -- the whole demo ---------------------------------------------------------------------
    async def main(self) -> int:
        self.journal.write_text("", encoding="utf-8")
        async with connect(self.url) as store:  # creates the schema before the workers race
            self.started_ms = _now_ms()
            self.spawn()
            began = time.monotonic()
            self.state.status = self.intro
            with self.view() as update:
                self.say(
                    "started "
                    + ", ".join(f"{i.name} (pid {i.process.pid})" for i in self.state.instances)
                )
                waiting_said = False
                while True:
                    await self.poll(store)
                    elapsed = time.monotonic() - began
                    self.maybe_kill(elapsed)
                    self.state.progress = f"{min(elapsed, self.duration):.0f} of {self.duration} s"
                    update()
                    running = [i for i in self.state.instances if i.alive]
                    if not running:
                        raise UnexpectedError(
                            f"every demo instance exited; see {self.log_path}: {self._log_tail()}"
                        )
                    pending = self._pending_takeovers()
                    if elapsed >= self.duration:
                        if not pending or elapsed >= self.duration + TAKEOVER_WAIT_S:
                            break
                        if not waiting_said:
                            waiting_said = True
                            slots = ", ".join(clock(s) for s in pending)
                            self.say(f"time is up; waiting for the takeover of slot {slots}")
                    await asyncio.sleep(POLL_S)
                await self.stop_workers()
                await self.poll(store)
                update()
                if not self.live:
                    for line in self.printer.lines(self.state, final=True):
                        self.console.print(line)
        lines, exactly_once = summary(self.state, self._journal_counts())
        self.console.print()
        for line in lines:
            self.console.print(line)
        self.console.print(
            f"\nthe store is kept: anarchon history '{self.url}' {DEMO_JOB} --limit 5"
        )
        return 0 if exactly_once else 1


@click.command()
@click.option("--instances", default=3, show_default=True, type=click.IntRange(1, 16))
@click.option(
    "--duration", default=20, show_default=True, type=click.IntRange(4, 600), help="Seconds."
)
@click.option(
    "--db",
    type=click.Path(dir_okay=False, path_type=Path),
    default=None,
    help="SQLite file to share (default: a new file in a temporary directory).",
)
@click.option("--plain", is_flag=True, help="Print plain lines, also on a terminal.")
@click.pass_context
def demo(ctx: click.Context, instances: int, duration: int, db: Path | None, plain: bool) -> None:
    """Watch several instances agree on who runs each slot, with no leader.

    Starts INSTANCES local processes sharing one SQLite file; each runs a Scheduler with the
    same one-second job. The view shows who won each slot, as the store recorded it. Midway one
    winner is killed with SIGKILL; a backup takes its run over once the lease runs out. At the
    end: a summary, with duplicates counted from the store's history (always 0).
    """
    configure_logging(ctx, "WARNING")
    if db is None:
        db = Path(tempfile.mkdtemp(prefix="anarchon-demo-")) / "demo.db"
    db = db.resolve()
    if not db.parent.is_dir():
        raise CliError(f"--db {str(db)!r}: the directory {str(db.parent)!r} does not exist")
    live = sys.stdout.isatty() and not plain
    console = Console(highlight=False, markup=False, soft_wrap=not live)
    session = Demo(
        db=db,
        count=instances,
        duration=duration,
        console=console,
        live=console.is_terminal and not plain,
    )
    try:
        code = asyncio.run(session.main())
    except KeyboardInterrupt:
        session.stop_all()
        click.echo(
            f"anarchon: interrupted; stopped {len(session.state.instances)} instance(s)", err=True
        )
        ctx.exit(130)
    finally:
        session.stop_all()
    ctx.exit(code)
