"""APScheduler 3 on two processes, its job guarded by `anarchon.once` (apscheduler_worker.py):
each second's slot runs once across them, with the sync and with the async scheduler, by the
processes' own journal and by the store's ledger."""

from __future__ import annotations

import asyncio
import math
import sqlite3
import time
from collections import Counter
from pathlib import Path
from typing import Any

import pytest

import anarchon
from anarchon import RunRecord, RunStatus
from anarchon_test_support.processes import worker_processes

pytest.importorskip("apscheduler")

WORKER = Path(__file__).with_name("apscheduler_worker.py")
SLOTS = 6
"""How many slots both processes must have seen before they are stopped."""


def journal(path: Path, table: str = "runs") -> list[tuple[Any, ...]]:
    """(pid, slot) of every run the processes executed; with ``fires``, (pid, at) of every
    fire of APScheduler's job."""
    db = sqlite3.connect(path, timeout=30)
    try:
        columns = "pid, slot" if table == "runs" else "pid, at"
        return list(db.execute(f"SELECT {columns} FROM {table} ORDER BY at"))
    except sqlite3.OperationalError:  # no run yet
        return []
    finally:
        db.close()


def fired_late(fires: list[tuple[Any, ...]], slot: int) -> bool:
    """Whether APScheduler fired the job of `slot` a second late in some process: that process
    fired twice within the next second, and `once(every="1s")` took the late fire for the next
    slot (docs/integrations/apscheduler.md: a fire more than `every` late loses its slot)."""
    per_pid = Counter(pid for pid, at in fires if slot + 1000 <= at * 1000 < slot + 2000)
    return any(n >= 2 for n in per_pid.values())


def history(url: str) -> list[RunRecord]:
    async def read() -> list[RunRecord]:
        async with anarchon.connect(url) as store:
            return await store.history("tick", 1000)

    return asyncio.run(read())


@pytest.mark.processes
@pytest.mark.parametrize("mode", ["sync", "async"])
def test_two_apscheduler_processes_guarded_by_once_run_each_slot_once(
    tmp_path: Path, mode: str
) -> None:
    store = f"sqlite:///{tmp_path / 'anarchon.db'}"
    runs_file = tmp_path / "journal.db"
    with worker_processes(WORKER, 2, mode, store, runs_file) as procs:
        for proc in procs:
            assert proc.stdout is not None
            line = proc.stdout.readline()
            assert line.strip() == "ready", f"{line!r} {proc.communicate()[1]}"
        both_up = time.time()
        first = math.ceil(both_up) * 1000
        last = first + (SLOTS - 1) * 1000
        deadline = time.monotonic() + SLOTS + 15
        while not any(slot >= last for _, slot in journal(runs_file)):
            assert time.monotonic() < deadline, f"no run of slot {last}: {journal(runs_file)}"
            assert all(p.poll() is None for p in procs), [p.communicate() for p in procs]
            time.sleep(0.05)
        for proc in procs:
            out, err = proc.communicate("stop\n", timeout=30)
            assert proc.returncode == 0 and out.splitlines()[-1] == "stopped", err

    runs = journal(runs_file)
    count = Counter(slot for _, slot in runs)
    assert not [s for s, n in count.items() if n > 1], f"slots run twice: {runs}"
    # On a loaded machine APScheduler can fire a second late; such a slot is not run (by
    # design, see fired_late), and only such a slot may be missing.
    fires = journal(runs_file, "fires")
    late = [slot for slot in range(first, last + 1, 1000) if fired_late(fires, slot)]
    due = [slot for slot in range(first, last + 1, 1000) if slot not in late]
    assert [count[slot] for slot in due] == [1] * len(due), runs
    assert len(late) < SLOTS // 2, f"APScheduler fired {late} late: {fires}"
    ledger = {r.slot: r for r in history(store)}
    unfinished = [
        ledger.get(slot)
        for slot in due
        if ledger.get(slot) is None or ledger[slot].status is not RunStatus.SUCCEEDED
    ]
    assert not unfinished, unfinished
    # The ledger's holder (host:pid:...) is the process that journaled the run.
    ran_by = {slot: pid for pid, slot in runs}
    assert all(ledger[slot].holder.split(":")[1] == str(ran_by[slot]) for slot in due), ledger
