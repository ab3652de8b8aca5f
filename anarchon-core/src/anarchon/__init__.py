"""anarchon: cron jobs that run exactly once across any number of instances, with no leader.

Every instance schedules every job; for each job and slot, one atomic step in a store the
application already runs decides which single instance runs it.

The contract (claims, errors, options, URLs, `anarchon.abc`) is imported here at once; the
runtime (`Scheduler`, `once`, ...), `connect` and `hookimpl` on first use (PEP 562), so that
``import anarchon.backend`` or ``import anarchon.abc`` loads neither the scheduler nor pluggy.
"""

from __future__ import annotations

from importlib import import_module
from typing import TYPE_CHECKING, Any

from ._capabilities import Capabilities
from ._claims import (
    MAX_ATTEMPTS,
    Claim,
    ClaimRequest,
    Outcome,
    Overlap,
    fencing_token,
    new_token,
)
from ._control import Pause, Trigger
from ._durations import to_ms
from ._errors import (
    AnarchonError,
    ConfigError,
    Fenced,
    StoreCorrupt,
    StoreNotSetUp,
    StoreUnavailable,
)
from ._fleet import Member
from ._names import check_name
from ._options import DurationMs, DurationMsOrZero, StoreOptions
from ._retries import Backoff
from ._runs import DamagedHistory, DamagedRun, RunRecord, RunStatus
from ._urls import StoreURL, redact
from .abc import (
    ClaimStore,
    LeaseStore,
    SupportsClaimMany,
    SupportsJobList,
    SupportsJobSetup,
    SupportsMembership,
    SupportsPause,
    SupportsPrepare,
    SupportsReadOnly,
    SupportsRetry,
    SupportsTrigger,
)

if TYPE_CHECKING:
    from ._backends.memory import MemoryStore
    from ._connect import connect, create_store
    from ._runtime.catch_up import CatchUp
    from ._runtime.cron import Schedule
    from ._runtime.handle import Run
    from ._runtime.health import Health, HealthServer, LastClaim, RunningJob
    from ._runtime.once import once
    from ._runtime.scheduler import Scheduler
    from .plugins import hookimpl

__version__ = "0.1.0"

_LAZY = {
    "CatchUp": "._runtime.catch_up",
    "Health": "._runtime.health",
    "HealthServer": "._runtime.health",
    "LastClaim": "._runtime.health",
    "MemoryStore": "._backends.memory",
    "Run": "._runtime.handle",
    "RunningJob": "._runtime.health",
    "Schedule": "._runtime.cron",
    "Scheduler": "._runtime.scheduler",
    "connect": "._connect",
    "create_store": "._connect",
    "hookimpl": ".plugins",
    "once": "._runtime.once",
}
"""Public names imported on first use, and the module each comes from."""


def __getattr__(name: str) -> Any:
    module = _LAZY.get(name)
    if module is None:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    value = getattr(import_module(module, __name__), name)
    globals()[name] = value  # found directly from now on
    return value


def __dir__() -> list[str]:
    return sorted({*globals(), *_LAZY})


__all__ = [
    "MAX_ATTEMPTS",
    "AnarchonError",
    "Backoff",
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
    "Member",
    "MemoryStore",
    "Outcome",
    "Overlap",
    "Pause",
    "Run",
    "RunRecord",
    "RunStatus",
    "RunningJob",
    "Schedule",
    "Scheduler",
    "StoreCorrupt",
    "StoreNotSetUp",
    "StoreOptions",
    "StoreURL",
    "StoreUnavailable",
    "SupportsClaimMany",
    "SupportsJobList",
    "SupportsJobSetup",
    "SupportsMembership",
    "SupportsPause",
    "SupportsPrepare",
    "SupportsReadOnly",
    "SupportsRetry",
    "SupportsTrigger",
    "Trigger",
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
