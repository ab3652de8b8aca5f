"""Helpers shared by the tests of every anarchon package (not a runtime dependency of any).

Each package's tests import these from here instead of from another package's test folder, so
that they run alone (``cd anarchon-redis && ../.venv/bin/pytest``).
"""

from __future__ import annotations

from .clocks import T0, ManualClock
from .markers import SERVICES, mark_services
from .processes import finish, go, wait_ready, worker_processes
from .race import outcomes, race_processes, race_spec, winners
from .retention import LIMIT, check_full_history
from .waiting import eventually

__all__ = [
    "LIMIT",
    "SERVICES",
    "T0",
    "ManualClock",
    "check_full_history",
    "eventually",
    "finish",
    "go",
    "mark_services",
    "outcomes",
    "race_processes",
    "race_spec",
    "wait_ready",
    "winners",
    "worker_processes",
]
