"""What ``anarchon demo`` shows: the state it reads from the store, a live rich view for
terminals, plain lines for everything else (CI logs, pipes), and the final summary."""

from __future__ import annotations

import subprocess
from collections import Counter
from datetime import datetime

import attrs
from rich.console import Group, RenderableType
from rich.panel import Panel
from rich.table import Table
from rich.text import Text

from .._runs import RunRecord, RunStatus

__all__ = ["DemoState", "Instance", "PlainPrinter", "render", "summary"]

SHOWN_SLOTS = 12
_STYLE = {
    RunStatus.RUNNING: "yellow",
    RunStatus.SUCCEEDED: "green",
    RunStatus.FAILED: "red",
    RunStatus.INTERRUPTED: "red",
}


def clock(slot_ms: int) -> str:
    """A slot as local wall time, ``12:00:05``."""
    return f"{datetime.fromtimestamp(slot_ms / 1000):%H:%M:%S}"


@attrs.define(eq=False)
class Instance:
    """One worker process of the demo."""

    name: str
    process: subprocess.Popen[bytes]
    killed: bool = False

    @property
    def alive(self) -> bool:
        return self.process.poll() is None

    @property
    def state(self) -> str:
        if self.killed:
            return "killed -9"
        code = self.process.poll()
        if code is None:
            return "running"
        return "stopped" if code == 0 else f"exited ({code})"


@attrs.define(eq=False)
class DemoState:
    """Everything the view shows; the runs come from the store's history, not from workers."""

    db_path: str
    instances: list[Instance]
    records: dict[int, RunRecord] = attrs.Factory(dict)
    """The latest record of each slot, by slot."""
    history_duplicates: int = 0
    """Slots that the store's history lists more than once (must stay 0)."""
    killed_slots: dict[int, str] = attrs.Factory(dict)
    """Runs the killed instance held when it was killed: slot -> its name."""
    kill_time: float | None = None
    takeovers: dict[int, float] = attrs.Factory(dict)
    """Slots taken over, with the monotonic time the takeover was first seen."""
    status: str = "starting the instances ..."
    progress: str = ""
    """Time so far, shown under the status panel."""

    def wins(self, name: str) -> int:
        return sum(1 for r in self.records.values() if r.holder == name)

    def note(self, record: RunRecord) -> str:
        victim = self.killed_slots.get(record.slot)
        if record.attempt > 1 and victim is not None:
            return f"takeover after kill -9 of {victim}"
        if record.attempt > 1:
            return "takeover"
        if victim is not None:
            return f"{victim} killed -9 mid-run; lease running out"
        return ""

    def takeover_line(self, record: RunRecord) -> str:
        victim = self.killed_slots.get(record.slot, "its holder")
        after = ""
        if self.kill_time is not None:
            after = f", {self.takeovers[record.slot] - self.kill_time:.1f} s after the kill"
        return (
            f"takeover after kill -9: {record.holder} won attempt {record.attempt} of slot "
            f"{clock(record.slot)} once the lease of {victim} ran out{after}"
        )


def render(state: DemoState) -> RenderableType:
    """The live view: a status panel, the recent slots, the instances."""
    slots = Table(title="recent slots, as the store decided them", title_justify="left")
    for column in ("slot", "winner", "attempt", "status", "note"):
        slots.add_column(column)
    for slot in sorted(state.records)[-SHOWN_SLOTS:]:
        record = state.records[slot]
        note = state.note(record)
        slots.add_row(
            clock(slot),
            record.holder,
            str(record.attempt),
            Text(str(record.status), style=_STYLE.get(record.status, "")),
            Text(note, style="bold magenta" if record.attempt > 1 else "magenta"),
        )
    people = Table(title="instances", title_justify="left")
    for column in ("instance", "pid", "state", "slots won"):
        people.add_column(column)
    for instance in state.instances:
        style = "red" if instance.killed else ("" if instance.alive else "dim")
        people.add_row(
            instance.name,
            str(instance.process.pid),
            Text(instance.state, style=style),
            str(state.wins(instance.name)),
        )
    panel = Panel(
        Text(state.status),
        title="anarchon demo",
        title_align="left",
        subtitle=state.progress or None,
        subtitle_align="right",
    )
    return Group(panel, slots, people)


@attrs.define
class PlainPrinter:
    """Plain lines for a log: each slot once it is over, and each takeover when first seen."""

    printed: set[int] = attrs.Factory(set)
    announced: set[int] = attrs.Factory(set)

    def lines(self, state: DemoState, final: bool = False) -> list[str]:
        out: list[str] = []
        for slot in sorted(state.records):
            record = state.records[slot]
            if slot in state.takeovers and slot not in self.announced:
                self.announced.add(slot)
                out.append(state.takeover_line(record))
            if slot in self.printed or not (record.status.finished or final):
                continue
            self.printed.add(slot)
            note = state.note(record)
            out.append(
                f"slot {clock(slot)}  winner {record.holder}  attempt {record.attempt}  "
                f"{record.status}" + (f"  ({note})" if note else "")
            )
        return out


def summary(state: DemoState, journal: Counter[int]) -> tuple[list[str], bool]:
    """The closing lines, and whether exactly-once held (no slot run twice)."""
    slots = sorted(state.records)
    records = [state.records[s] for s in slots]
    done_twice = sorted(s for s, n in journal.items() if n > 1)
    duplicates = state.history_duplicates + len(done_twice)
    missed = 0
    if slots:
        missed = (slots[-1] - slots[0]) // 1000 + 1 - len(slots)
    finished = Counter(str(r.status) for r in records)
    takeovers = [r for r in records if r.attempt > 1]
    after_kill = [r for r in takeovers if r.slot in state.killed_slots]
    wins = ", ".join(
        f"{i.name} {state.wins(i.name)}" + (" (killed -9)" if i.killed else "")
        for i in state.instances
    )
    history = "one run per slot" if not state.history_duplicates else "SLOTS LISTED TWICE"
    journal_note = f"slots done twice: {done_twice}" if done_twice else "no slot done twice"
    span = f" ({clock(slots[0])} to {clock(slots[-1])})" if slots else ""
    lines = [
        "summary",
        f"  slots decided   {len(slots)}{span}, {missed} missed",
        f"  runs            {sum(r.attempt for r in records)} won attempts; "
        + ", ".join(f"{n} {status}" for status, n in sorted(finished.items())),
        f"  takeovers       {len(takeovers)}"
        + (f" ({len(after_kill)} after kill -9)" if after_kill else ""),
        (
            f"  duplicates      {duplicates}  (store history: {history}; job journal: {journal_note})"
        ),
        f"  wins            {wins}",
    ]
    return lines, duplicates == 0
