"""One instance of the fleet in test_fleet_processes.py: ``python fleet_roles_worker.py CONFIG``.

It runs `jobs` secondly jobs with `Scheduler.run()` on a SQLite file with a member list, and
journals to its own SQLite file (``journal`` in the config), outside the store under test:

* ``runs``: each run it executes (job, slot, attempt, instance);
* ``roles``: its part in each (job, slot), from the ``anarchon_fleet_slot`` hook.

While the SQLite backend has no member list of its own (rule M1 lands there separately), the
store is `SQLiteWithMembers`: the real SQLite claim store, plus a member table in a second file,
with the same M1 semantics as memory://; with the real one installed it is used as it is.
"""

from __future__ import annotations

import asyncio
import json
import logging
import os
import sqlite3
import sys
import time
from collections.abc import Mapping
from typing import Any

import attrs

import anarchon
from anarchon import Capabilities, Member
from anarchon.plugins import StartedScheduler, hookimpl
from anarchon_sqlite import SQLiteStore

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


class SQLiteWithMembers(SQLiteStore):
    """SQLite's claims, and M1 in a side file (test scaffolding, see the module docstring)."""

    @property
    def capabilities(self) -> Capabilities:
        return attrs.evolve(super().capabilities, membership=True)

    def _members_db(self) -> sqlite3.Connection:
        db = sqlite3.connect(f"{self.path}.members", timeout=30, isolation_level=None)
        db.execute(
            "CREATE TABLE IF NOT EXISTS members (instance PRIMARY KEY, seen, until, started, stats)"
        )
        return db

    def _announce(self, instance: str, ttl_ms: int, stats: Mapping[str, int]) -> Member:
        now = time.time_ns() // 1_000_000
        db = self._members_db()
        try:
            db.execute("BEGIN IMMEDIATE")
            row = db.execute(
                "SELECT started, until FROM members WHERE instance = ?", (instance,)
            ).fetchone()
            started = row[0] if row is not None and row[1] >= now else now
            db.execute(
                "INSERT OR REPLACE INTO members VALUES (?, ?, ?, ?, ?)",
                (instance, now, now + ttl_ms, started, json.dumps(dict(stats))),
            )
            db.execute("COMMIT")
        finally:
            db.close()
        return Member(
            instance=instance, seen_ms=now, until_ms=now + ttl_ms, started_ms=started, stats=stats
        )

    def _members(self) -> list[Member]:
        now = time.time_ns() // 1_000_000
        db = self._members_db()
        try:
            rows = db.execute(
                "SELECT * FROM members WHERE until >= ? ORDER BY instance", (now,)
            ).fetchall()
        finally:
            db.close()
        return [
            Member(instance=i, seen_ms=s, until_ms=u, started_ms=b, stats=json.loads(t))
            for i, s, u, b, t in rows
        ]

    def _leave(self, instance: str) -> bool:
        db = self._members_db()
        try:
            return db.execute("DELETE FROM members WHERE instance = ?", (instance,)).rowcount > 0
        finally:
            db.close()

    async def announce(
        self, instance: str, ttl_ms: int, stats: Mapping[str, int] | None = None
    ) -> Member:
        return await asyncio.to_thread(self._announce, instance, ttl_ms, dict(stats or {}))

    async def members(self) -> list[Member]:
        return await asyncio.to_thread(self._members)

    async def leave(self, instance: str) -> bool:
        return await asyncio.to_thread(self._leave, instance)


def make_store() -> anarchon.ClaimStore:
    real = SQLiteStore.create(config["db"])
    if real.capabilities.membership:
        return real
    return SQLiteWithMembers.create(config["db"])


scheduler = anarchon.Scheduler(
    make_store(),
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
