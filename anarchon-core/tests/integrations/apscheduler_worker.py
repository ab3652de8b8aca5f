"""One process of test_apscheduler.py: APScheduler 3 with a secondly cron job, guarded by
`anarchon.once` as docs/integrations/apscheduler.md shows.

``python apscheduler_worker.py sync|async STORE_URL JOURNAL``: ``sync`` runs a
`BackgroundScheduler` whose job uses ``with anarchon.once(...)``; ``async`` an
`AsyncIOScheduler` whose coroutine job uses ``async with anarchon.once(...)`` on a store opened
once. Each run it executes is journaled (pid, slot) in the SQLite file JOURNAL. Prints ``ready``
once the scheduler started, stops (shutdown, waiting for running jobs) when a line arrives on
stdin, and prints ``stopped``.
"""

from __future__ import annotations

import asyncio
import os
import sqlite3
import sys
import time

from apscheduler.schedulers.asyncio import AsyncIOScheduler
from apscheduler.schedulers.background import BackgroundScheduler

import anarchon

MODE, STORE, JOURNAL = sys.argv[1:4]


def journal(slot: int | None) -> None:
    """A run this process executed (its slot), or, with None, a fire of APScheduler's job."""
    db = sqlite3.connect(JOURNAL, timeout=30, isolation_level=None)
    try:
        db.execute("CREATE TABLE IF NOT EXISTS runs (pid, slot, at)")
        db.execute("CREATE TABLE IF NOT EXISTS fires (pid, at)")
        if slot is None:
            db.execute("INSERT INTO fires VALUES (?, ?)", (os.getpid(), time.time()))
        else:
            db.execute("INSERT INTO runs VALUES (?, ?, ?)", (os.getpid(), slot, time.time()))
    finally:
        db.close()


def tick() -> None:
    journal(None)
    with anarchon.once(STORE, "tick", every="1s") as run:
        if run:  # None on the processes that did not win this second
            journal(run.slot)


def run_sync() -> None:
    scheduler = BackgroundScheduler(timezone="UTC")
    scheduler.add_job(tick, "cron", second="*", id="tick")
    with anarchon.once(STORE, "warm-up", slot=0):
        pass  # the store opened (once per process) before the first fire
    scheduler.start()
    print("ready", flush=True)
    sys.stdin.readline()
    scheduler.shutdown(wait=True)


async def run_async() -> None:
    store = anarchon.create_store(STORE)
    await store.open()  # one connection for every fire
    running: set[asyncio.Task[object]] = set()

    async def tick_async() -> None:
        task = asyncio.current_task()
        assert task is not None
        running.add(task)
        journal(None)
        try:
            async with anarchon.once(store, "tick", every="1s") as run:
                if run:
                    journal(run.slot)
        finally:
            running.discard(task)

    scheduler = AsyncIOScheduler(timezone="UTC")
    scheduler.add_job(tick_async, "cron", second="*", id="tick")
    scheduler.start()
    print("ready", flush=True)
    await asyncio.to_thread(sys.stdin.readline)
    # AsyncIOScheduler.shutdown() cancels the coroutine jobs still running: let them end first.
    scheduler.pause()
    await asyncio.sleep(0)  # jobs submitted just before the pause start
    if running:
        await asyncio.wait(set(running), timeout=10)
    scheduler.shutdown()
    await store.close()


if __name__ == "__main__":
    if MODE == "sync":
        run_sync()
    else:
        asyncio.run(run_async())
    print("stopped", flush=True)
