"""One instance for test_retries_fleet.py: ``python retry_worker.py STORE_URL JOURNAL_DB``.

Three jobs that raise, each with ``retries=2``: ``flaky`` (every 2 s) fails its first two
attempts and succeeds at the third, ``broken`` (every 2 s) always fails, ``late`` (every second)
always fails but waits 5 s before a retry, which would be after its next slot. Each try is
journalled in JOURNAL_DB (job, slot, attempt, pid), outside the store. It prints ``ready`` once
the scheduler started; SIGTERM stops it.
"""

from __future__ import annotations

import os
import sqlite3
import sys

import anarchon
from anarchon.plugins import StartedScheduler, hookimpl

store_url, journal_db = sys.argv[1:3]

BACKOFF = {"first": "100ms", "factor": 2, "max": "1s"}


def journal(job: str, run: anarchon.Run) -> None:
    db = sqlite3.connect(journal_db, timeout=30, isolation_level=None)
    try:
        db.execute("CREATE TABLE IF NOT EXISTS runs (job TEXT, slot INT, attempt INT, pid INT)")
        db.execute(
            "INSERT INTO runs VALUES (?, ?, ?, ?)", (job, run.slot, run.attempt, os.getpid())
        )
    finally:
        db.close()


scheduler = anarchon.Scheduler(store_url, instance=f"pid-{os.getpid()}", grace="2s", environ={})


class Ready:
    @hookimpl
    def anarchon_scheduler_started(self, scheduler: StartedScheduler) -> None:
        print("ready", flush=True)


scheduler.events.register(Ready(), name="retry-ready")


@scheduler.job(every="2s", name="flaky", lease="3s", retries=2, backoff=BACKOFF)
def flaky(run: anarchon.Run) -> None:
    journal("flaky", run)
    if run.attempt < 3:
        raise RuntimeError(f"flaky attempt {run.attempt}")


@scheduler.job(every="2s", name="broken", lease="3s", retries=2, backoff=BACKOFF)
async def broken(run: anarchon.Run) -> None:
    journal("broken", run)
    raise RuntimeError(f"broken attempt {run.attempt}")


# overlap="allow": on a loaded machine a slot's failed run may still hold its lease when the next
# slot (a second later) is claimed; that would be skipped (overlap), which is not what this job tests.
@scheduler.job(every="1s", name="late", lease="3s", retries=2, backoff="5s", overlap="allow")
def late(run: anarchon.Run) -> None:
    journal("late", run)
    raise RuntimeError("late")


scheduler.run()
