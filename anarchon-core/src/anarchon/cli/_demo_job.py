"""The job every ``anarchon demo`` instance runs, and its timing.

The job takes longer than its interval (so runs overlap and leases matter), checks its lease
while it works (F1), and appends one line to a journal when it completes, so the demo can check
that no slot's work was done twice.
"""

from __future__ import annotations

import json
import time

from .._runtime.handle import Run
from .._runtime.scheduler import Scheduler

__all__ = [
    "DEMO_JOB",
    "DEMO_PREFIX",
    "GRACE_MS",
    "HEARTBEAT_MS",
    "JOB_SECONDS",
    "LEASE_MS",
    "MAX_LATE_MS",
    "make_scheduler",
]

DEMO_JOB = "tick"
DEMO_PREFIX = "demo"
JOB_SECONDS = 1.5
LEASE_MS = 3_000
HEARTBEAT_MS = 1_000
MAX_LATE_MS = 2_000
GRACE_MS = 4_000


def make_scheduler(url: str, instance: str, journal: str) -> Scheduler:
    scheduler = Scheduler(url, instance=instance, grace=GRACE_MS)

    @scheduler.job(
        "* * * * * *",
        name=DEMO_JOB,
        lease=LEASE_MS,
        heartbeat=HEARTBEAT_MS,
        max_late=MAX_LATE_MS,
        overlap="allow",
        attempts=3,
    )
    def tick(run: Run) -> None:
        deadline = time.monotonic() + JOB_SECONDS
        while time.monotonic() < deadline:
            time.sleep(0.05)
            run.ensure_held()  # a fenced runner stops before doing more work (F1)
        line = json.dumps({"slot": run.slot, "attempt": run.attempt, "instance": instance})
        with open(journal, "a", encoding="utf-8") as f:
            f.write(line + "\n")

    return scheduler
