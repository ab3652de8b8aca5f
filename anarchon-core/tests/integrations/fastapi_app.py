"""The FastAPI app of test_fastapi.py, as a user would write it with
`anarchon.integrations.fastapi`: the one-line lifespan (composed with the app's own), the health
routes, and no logging configuration of its own.

Configured by the environment: ``ANARCHON_TEST_APP_STORE`` (the store URL),
``ANARCHON_TEST_APP_JOURNAL`` (an SQLite file outside the store where each worker journals its
life and every run it executes), ``ANARCHON_TEST_APP_HOLD`` (when this file exists as the first
attempt of a ``long`` run starts, the run journals ``held`` and holds on until the file is gone
or the run cancelled; other runs, takeovers included, journal ``long`` and end at once).
"""

from __future__ import annotations

import asyncio
import os
import sqlite3
import time
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path

from fastapi import FastAPI

import anarchon
from anarchon.integrations.fastapi import anarchon_lifespan, health_routes

JOURNAL = os.environ["ANARCHON_TEST_APP_JOURNAL"]
HOLD = Path(os.environ["ANARCHON_TEST_APP_HOLD"])


def journal(what: str, slot: int | None = None, attempt: int | None = None) -> None:
    db = sqlite3.connect(JOURNAL, timeout=30, isolation_level=None)
    try:
        db.execute("CREATE TABLE IF NOT EXISTS journal (pid, what, slot, attempt, at)")
        db.execute(
            "INSERT INTO journal VALUES (?, ?, ?, ?, ?)",
            (os.getpid(), what, slot, attempt, time.time()),
        )
    finally:
        db.close()


scheduler = anarchon.Scheduler(
    os.environ["ANARCHON_TEST_APP_STORE"], instance=f"pid-{os.getpid()}", grace="0.3s", environ={}
)


@scheduler.job("* * * * * *", name="tick", lease="3s", max_late="3s", catch_up="all")
def tick(run: anarchon.Run) -> None:
    journal("tick", run.slot, run.attempt)


@scheduler.job("* * * * * *", name="long", lease="30s", heartbeat="0.3s", attempts=3)
async def long(run: anarchon.Run) -> None:
    holds = run.attempt == 1 and await asyncio.to_thread(HOLD.exists)
    journal("held" if holds else "long", run.slot, run.attempt)
    # Polls a file the test removes (another process): no event to wait for.
    while holds and await asyncio.to_thread(HOLD.exists):  # noqa: ASYNC110
        await asyncio.sleep(0.05)


@asynccontextmanager
async def own_lifespan(app: FastAPI) -> AsyncIterator[None]:
    """The app's own resources: opened before the scheduler starts, closed after it stopped."""
    journal("opened")
    yield
    journal("closed")


app = FastAPI(lifespan=anarchon_lifespan(scheduler, own_lifespan), routes=health_routes(scheduler))
