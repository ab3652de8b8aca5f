"""The test project's jobs (imported by the integration at startup), chosen by
``TEST_DJANGO_JOBS``: ``ticks`` (a sync and an async job every second), ``long`` (runs for a
minute from the slot in the ``gate`` file next to the database on), ``broken`` (a bad cron)."""

from __future__ import annotations

import asyncio
import atexit
import json
import os
import time
from pathlib import Path
from typing import Any

from asgiref.sync import sync_to_async
from django.db import connections

from anarchon import Run
from anarchon.integrations.django import scheduler

from .models import Tick

JOBS = set(os.environ.get("TEST_DJANGO_JOBS", "").split(","))
GATE = Path(os.environ.get("TEST_DJANGO_DB", "journal.db")).with_name("gate")

_previous: dict[str, Any] = {}
"""Per job, the connection wrapper its previous run used (kept alive to look at it later)."""


def _left_open(job: str) -> bool:
    previous = _previous.get(job)
    return previous is not None and previous.connection is not None


def _record(run: Run, event: str, left_open: bool = False) -> None:
    Tick.objects.create(
        job=run.job,
        slot=run.slot,
        attempt=run.attempt,
        pid=os.getpid(),
        event=event,
        left_open=left_open,
        at=time.time(),
    )
    _previous[run.job] = connections["default"]


def _report_at_exit() -> None:
    """Whether the connection each job's last run used is still open now, at exit: the run
    closes it when it ends, not only the next run when it starts."""
    left_open = {job: wrapper.connection is not None for job, wrapper in _previous.items()}
    GATE.with_name(f"exit-{os.getpid()}.json").write_text(json.dumps(left_open))


def gated(slot: int) -> bool:
    try:
        return slot >= int(GATE.read_text())
    except (OSError, ValueError):
        return False


if "ticks" in JOBS:
    atexit.register(_report_at_exit)

    @scheduler.job("* * * * * *", max_late="5s")
    def tick(run: Run) -> None:
        _record(run, "ran", _left_open(run.job))

    @scheduler.job("* * * * * *", max_late="5s")
    async def atick(run: Run) -> None:
        await sync_to_async(_record)(run, "ran", _left_open(run.job))


if "long" in JOBS:

    @scheduler.job("* * * * * *", lease="20s", heartbeat="1s", max_late="10s")
    async def long(run: Run) -> None:
        if not gated(run.slot):
            return
        await sync_to_async(_record)(run, "started")
        await asyncio.sleep(60 if run.attempt == 1 else 0.1)
        await sync_to_async(_record)(run, "finished")


if "broken" in JOBS:

    @scheduler.job("61 * * * *")
    def broken() -> None:
        pass
