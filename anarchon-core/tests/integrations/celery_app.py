"""The Celery app of test_celery.py, run by the real ``celery`` command (beat nodes, a worker).

Configured by environment variables: ``BROKER`` (a Redis URL), ``QUEUE`` (this test's own),
``STORE`` and ``PREFIX`` (the anarchon store), ``INSTANCE`` (a beat node's id), ``JOURNAL`` (a
file the worker appends one line to per task: entry, slot, the time it ran).
"""

from __future__ import annotations

import json
import os
import time
from typing import Any

from celery import Celery, Task
from celery.schedules import crontab

app = Celery("anarchon_celery_test")
app.conf.update(
    broker_url=os.environ["BROKER"],
    broker_connection_retry_on_startup=True,
    task_default_queue=os.environ["QUEUE"],
    task_ignore_result=True,
    worker_prefetch_multiplier=1,
    beat_scheduler="anarchon.integrations.celery:Scheduler",
    anarchon_store=os.environ["STORE"],
    anarchon_prefix=os.environ["PREFIX"],
    anarchon_instance=os.environ.get("INSTANCE"),
    beat_schedule={
        "every-second": {
            "task": "anarchon_test.journal",
            "schedule": 1.0,
            "args": ("every-second",),
        },
        # Not a valid job name: the scheduler names its job every-minute-<hash>.
        "every.minute": {
            "task": "anarchon_test.journal",
            "schedule": crontab(),
            "args": ("every.minute",),
        },
    },
)


@app.task(bind=True, name="anarchon_test.journal")
def journal(self: Task[Any, Any], entry: str) -> None:
    """Append what ran, for which slot (the header the scheduler stamps), and when."""
    row = {"entry": entry, "slot": self.request.anarchon_slot, "at": time.time()}
    with open(os.environ["JOURNAL"], "a", encoding="utf-8") as file:
        file.write(json.dumps(row) + "\n")
