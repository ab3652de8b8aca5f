"""One instance of the fleet in test_fleet_processes.py: ``python fleet_roles_worker.py CONFIG``.

It runs `jobs` secondly jobs with `Scheduler.run()` on a store with a member list (SQLite or Redis), and
journals to its own SQLite file (``journal`` in the config), outside the store under test:

* ``runs``: each run it executes (job, slot, attempt, instance);
* ``roles``: its part in each (job, slot), from the ``anarchon_fleet_slot`` hook.
"""

from __future__ import annotations

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
    level=logging.WARNING, stream=sys.stderr, format="%(asctime)s %(process)d %(name)s %(message)s"
)
INSTANCE = f"pid-{os.getpid()}"


def journal(sql: str, *values: object) -> None:
    db = sqlite3.connect(config["journal"], timeout=30, isolation_level=None)
    try:
        db.execute(sql, values)
    finally:
        db.close()


scheduler = anarchon.Scheduler(
    config["store"],
    instance=INSTANCE,
    grace="2s",
    contenders=config["contenders"],
    fleet_grace=config["fleet_grace"],
    fleet_refresh=config["fleet_refresh"],
    environ={},
)


class Journal:
    @hookimpl
    def anarchon_scheduler_started(self, scheduler: StartedScheduler) -> None:
        print("ready", flush=True)

    @hookimpl
    def anarchon_fleet_slot(self, job: str, slot: int, role: str, won: bool) -> None:
        journal(
            "INSERT INTO roles VALUES (?, ?, ?, ?, ?, ?)",
            job,
            slot,
            INSTANCE,
            role,
            int(won),
            time.time(),
        )


scheduler.events.register(Journal(), name="journal")


def job(run: anarchon.Run) -> None:
    journal(
        "INSERT INTO runs VALUES (?, ?, ?, ?, ?)",
        run.job,
        run.slot,
        run.attempt,
        INSTANCE,
        time.time(),
    )


for j in range(config["jobs"]):
    scheduler.add_job(
        job,
        "* * * * * *",
        name=f"j{j}",
        max_late=config["max_late"],
        lease=config["lease"],
        # A run won by an instance killed before it ran is taken over after its lease: with
        # overlap "skip" its lease would make the next slot a (recorded) skip.
        overlap="allow",
    )

scheduler.run()
