"""One instance for test_every.py: ``python every_worker.py STORE_DB JOURNAL_DB EVERY OFFSET``.

It runs the job ``pulse`` with ``every=EVERY, offset=OFFSET`` on the SQLite store STORE_DB with
`Scheduler.run()`, as an application would, and journals to JOURNAL_DB, outside the store:
``runs`` (each run it executed) and ``claims`` (every claim it sent and the answer). It prints
``ready`` once the scheduler started; SIGTERM stops it.
"""

from __future__ import annotations

import os
import sqlite3
import sys
import time

import anarchon
from anarchon.plugins import StartedScheduler, hookimpl

store_db, journal_db, every, offset = sys.argv[1:5]


def journal(sql: str, *values: object) -> None:
    """One autocommitted insert; the journal is shared by every instance."""
    db = sqlite3.connect(journal_db, timeout=30, isolation_level=None)
    try:
        db.execute(sql, values)
    finally:
        db.close()


scheduler = anarchon.Scheduler(
    f"sqlite:///{store_db}", instance=f"pid-{os.getpid()}", grace="2s", environ={}
)


class Journal:
    @hookimpl
    def anarchon_scheduler_started(self, scheduler: StartedScheduler) -> None:
        print("ready", flush=True)

    @hookimpl
    def anarchon_claim_decided(
        self, store: str, request: anarchon.ClaimRequest, claim: anarchon.Claim, latency_ms: float
    ) -> None:
        journal(
            "INSERT INTO claims VALUES (?, ?, ?, ?)",
            request.slot,
            str(claim.outcome),
            os.getpid(),
            time.time(),
        )


scheduler.events.register(Journal(), name="every-journal")


@scheduler.job(every=every, offset=offset, name="pulse")
def pulse(run: anarchon.Run) -> None:
    journal("INSERT INTO runs VALUES (?, ?, ?, ?)", run.slot, run.attempt, os.getpid(), time.time())


with sqlite3.connect(journal_db, timeout=30) as db:
    db.execute("CREATE TABLE IF NOT EXISTS runs (slot, attempt, pid, at)")
    db.execute("CREATE TABLE IF NOT EXISTS claims (slot, outcome, pid, at)")
scheduler.run()
