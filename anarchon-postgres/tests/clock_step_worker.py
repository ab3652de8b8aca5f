"""A scheduler process for test_clock_step.py: ``python clock_step_worker.py URL RUNS_DB GATE``.

One long sync job, in 20 ms steps; each step is journaled in RUNS_DB (a plain SQLite file,
independent of the store under test) with whether the run was fenced when the step ran.
"""

from __future__ import annotations

import logging
import os
import sqlite3
import sys
import time

import anarchon

url, runs_db, gate_file = sys.argv[1:4]
logging.basicConfig(level=logging.INFO, stream=sys.stderr, format="%(name)s %(message)s")


def record(slot: int, attempt: int, event: str) -> None:
    db = sqlite3.connect(runs_db, timeout=30, isolation_level=None)
    try:
        db.execute(
            "CREATE TABLE IF NOT EXISTS runs (slot INT, attempt INT, pid INT, event TEXT, at REAL)"
        )
        db.execute(
            "INSERT INTO runs VALUES (?, ?, ?, ?, ?)",
            (slot, attempt, os.getpid(), event, time.time()),
        )
    finally:
        db.close()


def gated(slot: int) -> bool:
    try:
        with open(gate_file) as f:
            return slot >= int(f.read())
    except (OSError, ValueError):
        return False


scheduler = anarchon.Scheduler(url, instance=f"pid-{os.getpid()}", grace="300ms", environ={})


@scheduler.job("* * * * * *", name="long", lease="6s", heartbeat="2s", max_late="5s")
def long(run: anarchon.Run) -> None:
    if not gated(run.slot):
        return
    record(run.slot, run.attempt, "started")
    for _ in range(1500):
        if run.fenced:
            record(run.slot, run.attempt, "fenced")
            return
        record(run.slot, run.attempt, "step")
        time.sleep(0.02)


print("ready", flush=True)
scheduler.run()
