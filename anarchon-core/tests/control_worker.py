"""One instance for test_control_fleet.py: ``python control_worker.py STORE_URL JOURNAL_DB``.

It runs two jobs with `Scheduler.run()`, as an application would: ``tick`` every second and
``yearly`` on New Year only (any run of it in a test is a triggered one), polling for triggers
every second (``trigger_poll="1s"``). It journals to JOURNAL_DB, outside the store: ``runs``
(each run it executed) and ``claims`` (every claim it sent and the answer). It prints ``ready``
once the scheduler started; SIGTERM stops it.
"""

from __future__ import annotations

import os
import sqlite3
import sys
import time

import anarchon
from anarchon.plugins import StartedScheduler, hookimpl

store_url, journal_db = sys.argv[1:3]


def journal(sql: str, *values: object) -> None:
    """One autocommitted insert; the journal is shared by every instance."""
    db = sqlite3.connect(journal_db, timeout=30, isolation_level=None)
    try:
        db.execute(sql, values)
    finally:
        db.close()


scheduler = anarchon.Scheduler(
    store_url, instance=f"pid-{os.getpid()}", grace="2s", trigger_poll="1s", environ={}
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
            "INSERT INTO claims VALUES (?, ?, ?, ?, ?, ?)",
            request.job,
            request.slot,
            str(claim.outcome),
            claim.reason,
            os.getpid(),
            time.time(),
        )


scheduler.events.register(Journal(), name="control-journal")


@scheduler.job(every="1s", name="tick")
def tick(run: anarchon.Run) -> None:
    journal(
        "INSERT INTO runs VALUES (?, ?, ?, ?, ?)",
        "tick",
        run.slot,
        run.triggered,
        os.getpid(),
        time.time(),
    )


@scheduler.job("0 0 1 1 *", name="yearly")
def yearly(run: anarchon.Run) -> None:
    journal(
        "INSERT INTO runs VALUES (?, ?, ?, ?, ?)",
        "yearly",
        run.slot,
        run.triggered,
        os.getpid(),
        time.time(),
    )


with sqlite3.connect(journal_db, timeout=30) as db:
    db.execute("CREATE TABLE IF NOT EXISTS runs (job, slot, triggered, pid, at)")
    db.execute("CREATE TABLE IF NOT EXISTS claims (job, slot, outcome, reason, pid, at)")
scheduler.run()
