"""anarchon: cron jobs that run exactly once across any number of instances, with no leader.

Every instance schedules every job; for each job and slot, one atomic step in a store the
application already runs decides which single instance runs it.
"""

from __future__ import annotations

from ._backends.memory import MemoryStore
from ._capabilities import Capabilities
from ._catch_up import CatchUp
from ._claims import (
    MAX_ATTEMPTS,
    Claim,
    ClaimRequest,
    Outcome,
    Overlap,
    fencing_token,
    new_token,
)
from ._connect import connect, create_store
from ._durations import to_ms
from ._errors import AnarchonError, ConfigError, Fenced, StoreCorrupt, StoreUnavailable
from ._health import Health, HealthServer, LastClaim, RunningJob
from ._names import check_name
from ._once import once
from ._options import DurationMs, DurationMsOrZero, StoreOptions
from ._run import Run
from ._runs import DamagedHistory, DamagedRun, RunRecord, RunStatus
from ._schedule import Schedule
from ._scheduler import Scheduler
from ._urls import StoreURL, redact
from .abc import (
    ClaimStore,
    LeaseStore,
    SupportsClaimMany,
    SupportsJobList,
    SupportsJobSetup,
    SupportsPrepare,
)
from .plugins import hookimpl

__version__ = "0.1.0"

__all__ = [
    "MAX_ATTEMPTS",
    "AnarchonError",
    "Capabilities",
    "CatchUp",
    "Claim",
    "ClaimRequest",
    "ClaimStore",
    "ConfigError",
    "DamagedHistory",
    "DamagedRun",
    "DurationMs",
    "DurationMsOrZero",
    "Fenced",
    "Health",
    "HealthServer",
    "LastClaim",
    "LeaseStore",
    "MemoryStore",
    "Outcome",
    "Overlap",
    "Run",
    "RunRecord",
    "RunStatus",
    "RunningJob",
    "Schedule",
    "Scheduler",
    "StoreCorrupt",
    "StoreOptions",
    "StoreURL",
    "StoreUnavailable",
    "SupportsClaimMany",
    "SupportsJobList",
    "SupportsJobSetup",
    "SupportsPrepare",
    "__version__",
    "check_name",
    "connect",
    "create_store",
    "fencing_token",
    "hookimpl",
    "new_token",
    "once",
    "redact",
    "to_ms",
]
