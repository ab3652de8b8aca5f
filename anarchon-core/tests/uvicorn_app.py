"""The FastAPI app of test_uvicorn_degraded.py, as a user would write it: the scheduler runs in
the app's lifespan, ``GET /readyz`` answers its readiness.

Configured by the environment: ``ANARCHON_TEST_APP_STORE`` (the store URL),
``ANARCHON_TEST_APP_JOURNAL`` (an SQLite file outside the store where each worker journals its
life, ``booted`` and ``connected``, and each run it executes).
"""

from __future__ import annotations

import os
import sqlite3
import time
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Any

from fastapi import FastAPI, Response

import anarchon
from anarchon.plugins import StartedScheduler, hookimpl

JOURNAL = os.environ["ANARCHON_TEST_APP_JOURNAL"]


def journal(table: str, *values: object) -> None:
    db = sqlite3.connect(JOURNAL, timeout=30, isolation_level=None)
    try:
        db.execute(f"CREATE TABLE IF NOT EXISTS {table} (pid, what, slot, attempt, at)")
        db.execute(f"INSERT INTO {table} VALUES (?, ?, ?, ?, ?)", (os.getpid(), *values))
    finally:
        db.close()


scheduler = anarchon.Scheduler(
    os.environ["ANARCHON_TEST_APP_STORE"], instance=f"pid-{os.getpid()}", environ={}
)


class Connected:
    @hookimpl
    def anarchon_scheduler_started(self, scheduler: StartedScheduler) -> None:
        """Emitted once the store answered and dispatching began (after a degraded start)."""
        journal("life", "connected", None, None, time.time())


scheduler.events.register(Connected(), name="app-journal")


@scheduler.job("* * * * * *", name="tick", lease="3s", max_late="3s", catch_up="all")
def tick(run: anarchon.Run) -> None:
    journal("runs", "ran", run.slot, run.attempt, time.time())


@asynccontextmanager
async def lifespan(app: FastAPI) -> AsyncIterator[None]:
    async with scheduler:
        journal("life", "booted", None, None, time.time())
        yield


app = FastAPI(lifespan=lifespan)


@app.get("/readyz")
async def readyz(response: Response) -> dict[str, Any]:
    health = scheduler.health()
    response.status_code = 200 if health.ready else 503
    return {"ready": health.ready, "pid": os.getpid(), "last_error": health.last_error}
