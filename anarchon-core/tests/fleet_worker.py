"""One instance of the fleet in test_fleet_restarts.py: ``python fleet_worker.py CONFIG_JSON``.

It runs a secondly job ``tick`` with `Scheduler.run()`, as an application would, and journals to
its own SQLite file (``journal`` in the config), outside the store under test:

* ``runs``: each attempt it executes: ``start``, then ``end`` (``ok`` or ``cancelled``);
* ``claims``: every claim it sent and the answer (what the instance saw, for failure messages);
* ``life``: ``up`` once the scheduler started, ``down`` once `run()` returned.

The run of the slot named in the ``gate`` file, attempt 1, is long (``long_s``), so the test can
stop or kill the instance running it; every other run takes a few milliseconds.
"""

from __future__ import annotations

import asyncio
import json
import logging
import os
import sqlite3
import sys
import time
from typing import Any

import anarchon
from anarchon.plugins import StartedScheduler, hookimpl

config: dict[str, Any] = json.loads(sys.argv[1])
logging.basicConfig(
    level=logging.INFO, stream=sys.stderr, format="%(asctime)s %(process)d %(name)s %(message)s"
)

SCHEMA = (
    "CREATE TABLE IF NOT EXISTS runs (slot, attempt, fence, token, pid, event, at)",
    "CREATE TABLE IF NOT EXISTS claims (slot, outcome, attempt, reason, pid, at)",
    "CREATE TABLE IF NOT EXISTS life (pid, event, at)",
)


def journal(sql: str, *values: object) -> None:
    """One autocommitted insert; the journal is shared by every instance of the fleet."""
    db = sqlite3.connect(config["journal"], timeout=30, isolation_level=None)
    try:
        db.execute(sql, values)
    finally:
        db.close()


def long_slot() -> int | None:
    try:
        with open(config["gate"]) as f:
            return int(f.read())
    except (OSError, ValueError):
        return None


scheduler = anarchon.Scheduler(
    config["store"],
    instance=f"pid-{os.getpid()}",
    grace=config["grace"],
    fleet_refresh=config.get("fleet_refresh"),
    environ={},
)


class Journal:
    @hookimpl
    def anarchon_scheduler_started(self, scheduler: StartedScheduler) -> None:
        journal("INSERT INTO life VALUES (?, 'up', ?)", os.getpid(), time.time())
        print("ready", flush=True)

    @hookimpl
    def anarchon_claim_decided(
        self, store: str, request: anarchon.ClaimRequest, claim: anarchon.Claim, latency_ms: float
    ) -> None:
        journal(
            "INSERT INTO claims VALUES (?, ?, ?, ?, ?, ?)",
            request.slot,
            str(claim.outcome),
            claim.attempt,
            claim.reason,
            os.getpid(),
            time.time(),
        )


scheduler.events.register(Journal(), name="fleet-journal")


@scheduler.job(
    "* * * * * *",
    name="tick",
    lease=config["lease"],
    heartbeat=config["heartbeat"],
    max_late=config["max_late"],
    catch_up=config["catch_up"],
)
async def tick(run: anarchon.Run) -> None:
    record = "INSERT INTO runs VALUES (?, ?, ?, ?, ?, ?, ?)"
    fields = (run.slot, run.attempt, run.fencing_token, run.token, os.getpid())
    journal(record, *fields, "start", time.time())
    ended = "cancelled"
    try:
        if run.slot == long_slot() and run.attempt == 1:
            await asyncio.sleep(config["long_s"])
        ended = "ok"
    finally:
        # A cancelled attempt (shutdown past the grace period, or fenced) journals its end too:
        # the test checks it ended before a backup's attempt started.
        journal(record, *fields, ended, time.time())


with sqlite3.connect(config["journal"], timeout=30) as db:
    for statement in SCHEMA:
        db.execute(statement)
scheduler.run()
journal("INSERT INTO life VALUES (?, 'down', ?)", os.getpid(), time.time())
