"""A scheduler process for test_processes.py: ``python scheduler_worker.py MODE STORE_DB RUNS_DB``.

Each run it executes is recorded in RUNS_DB (a plain SQLite table the tests read), independently
of the store under test.
"""

from __future__ import annotations

import logging
import os
import sqlite3
import sys
import time

import anarchon

mode, store_db, runs_db = sys.argv[1:4]
logging.basicConfig(level=logging.INFO, stream=sys.stderr, format="%(name)s %(message)s")


GATE = os.path.join(os.path.dirname(runs_db), "gate")


def gated(slot: int) -> bool:
    """Long runs only for slots at or after the gate the test opens once every worker is up:
    such a slot is claimed by every worker at its fire time, so the losers become its backups.
    (A catch-up slot near the edge of the window may be claimed by one worker only.)"""
    try:
        with open(GATE) as f:
            return slot >= int(f.read())
    except (OSError, ValueError):
        return False


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


scheduler = anarchon.Scheduler(
    f"sqlite:///{store_db}", instance=f"pid-{os.getpid()}", grace="300ms", environ={}
)

if mode == "every-second":

    @scheduler.job("* * * * * *", name="tick", max_late="5s", overlap="allow")
    def tick(run: anarchon.Run) -> None:
        record(run.slot, run.attempt, "ran")

elif mode == "long-async":

    @scheduler.job("* * * * * *", name="long", lease="1500ms", heartbeat="300ms", max_late="10s")
    async def long_async(run: anarchon.Run) -> None:
        import asyncio

        if not gated(run.slot):
            return
        record(run.slot, run.attempt, "started")
        await asyncio.sleep(60 if run.attempt == 1 else 0.1)
        record(run.slot, run.attempt, "finished")

elif mode == "long-lease":

    @scheduler.job("* * * * * *", name="long", lease="20s", heartbeat="1s", max_late="10s")
    async def long_lease(run: anarchon.Run) -> None:
        import asyncio

        if not gated(run.slot):
            return
        record(run.slot, run.attempt, "started")
        await asyncio.sleep(60 if run.attempt == 1 else 0.1)
        record(run.slot, run.attempt, "finished")

elif mode == "long-sync":

    @scheduler.job("* * * * * *", name="long", lease="1500ms", heartbeat="300ms", max_late="10s")
    def long_sync(run: anarchon.Run) -> None:
        if not gated(run.slot):
            return
        record(run.slot, run.attempt, "started")
        if run.attempt > 1:
            record(run.slot, run.attempt, "finished")
            return
        for _ in range(600):
            time.sleep(0.05)
            try:
                run.ensure_held()
            except anarchon.Fenced:
                record(run.slot, run.attempt, "fenced")
                raise

elif mode == "steps-async":
    # F1: every step journals whether the run was fenced when it ran; after SIGSTOP past the
    # lease, no step may run fenced (it is cancelled instead).
    @scheduler.job("* * * * * *", name="long", lease="1500ms", heartbeat="300ms", max_late="10s")
    async def steps_async(run: anarchon.Run) -> None:
        import asyncio

        if not gated(run.slot):
            return
        record(run.slot, run.attempt, "started")
        if run.attempt > 1:
            record(run.slot, run.attempt, "finished")
            return
        try:
            for _ in range(1200):
                await asyncio.sleep(0.05)
                record(run.slot, run.attempt, "step-fenced" if run.fenced else "step")
        except asyncio.CancelledError:
            record(run.slot, run.attempt, "cancelled")
            raise

elif mode == "steps-sync":
    # F1 at exit: a sync job fenced by the shutdown still runs its except/finally.
    @scheduler.job("* * * * * *", name="long", lease="20s", heartbeat="1s", max_late="10s")
    def steps_sync(run: anarchon.Run) -> None:
        if not gated(run.slot):
            return
        record(run.slot, run.attempt, "started")
        if run.attempt > 1:
            return
        try:
            for _ in range(600):
                time.sleep(0.5)
                run.ensure_held()
        except anarchon.Fenced:
            record(run.slot, run.attempt, "fenced")
            raise
        finally:
            record(run.slot, run.attempt, "finally")

else:
    raise SystemExit(f"unknown mode {mode}")

print("ready", flush=True)
scheduler.run()
