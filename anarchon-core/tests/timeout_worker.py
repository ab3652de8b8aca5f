"""A scheduler process for test_timeout.py: ``python timeout_worker.py MODE STORE_DB RUNS_DB``.

Its job, every second, hangs past its 400 ms timeout: ``sync`` ignores the fence for 1.8 s
(longer than the 1 s lease, so a backup would take it over if the run were not recorded
failed), ``async`` waits to be cancelled. Each event is journalled in RUNS_DB (a plain SQLite
table the test reads), independently of the store under test.
"""

from __future__ import annotations

import asyncio
import logging
import os
import sqlite3
import sys
import time

import anarchon

mode, store_db, runs_db = sys.argv[1:4]
logging.basicConfig(level=logging.INFO, stream=sys.stderr, format="%(name)s %(message)s")


def record(slot: int, attempt: int, event: str) -> None:
    db = sqlite3.connect(runs_db, timeout=30, isolation_level=None)
    try:
        db.execute("CREATE TABLE IF NOT EXISTS runs (slot INT, attempt INT, pid INT, event TEXT)")
        db.execute("INSERT INTO runs VALUES (?, ?, ?, ?)", (slot, attempt, os.getpid(), event))
    finally:
        db.close()


scheduler = anarchon.Scheduler(
    f"sqlite:///{store_db}", instance=f"pid-{os.getpid()}", grace="2s", environ={}
)
settings = {"name": "hang", "lease": "1s", "heartbeat": "200ms", "timeout": "400ms"}

if mode == "sync":

    @scheduler.job("* * * * * *", **settings)  # type: ignore[arg-type]
    def hang_sync(run: anarchon.Run) -> None:
        record(run.slot, run.attempt, "started")
        deadline = time.monotonic() + 1.8
        while time.monotonic() < deadline:
            if run.fenced:
                record(run.slot, run.attempt, "fenced")
                break
            time.sleep(0.01)
        time.sleep(max(0.0, deadline - time.monotonic()))  # on past the lease, regardless
        record(run.slot, run.attempt, "returned")

elif mode == "async":

    @scheduler.job("* * * * * *", **settings)  # type: ignore[arg-type]
    async def hang_async(run: anarchon.Run) -> None:
        record(run.slot, run.attempt, "started")
        try:
            await asyncio.sleep(60)
        except asyncio.CancelledError:
            record(run.slot, run.attempt, "fenced" if run.fenced else "cancelled")
            raise

else:
    raise SystemExit(f"unknown mode {mode}")

print("ready", flush=True)
scheduler.run()
