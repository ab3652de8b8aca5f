"""Catch-up (T6): what an instance does with a job's slots that it reaches late.

A slot is *missed* when, as the job's lane takes it, a later slot of the job is already due (by
the store-corrected clock): the instance was starting, stalled, or lost the store for a while.
The policy decides what becomes of it; whatever it is, the slot ends with one record in the
store (the ledger), so nothing vanishes silently.
"""

from __future__ import annotations

import enum

from .._errors import ConfigError

__all__ = [
    "DEFAULT_CATCH_UP",
    "LATE_RECORDS_MAX",
    "CatchUp",
    "late_skip",
    "missed_skip",
    "parse_catch_up",
]

LATE_RECORDS_MAX = 100
"""Slots older than ``max_late`` (a long stall, a forward clock jump, a long wait for the store)
are recorded ``skipped: late`` one claim each, the newest this many per job; older ones are
only logged."""


class CatchUp(str, enum.Enum):
    """What happens to a job's missed slots (`Scheduler.job(catch_up=...)`)."""

    LATEST = "latest"
    """Run the newest due slot; record the older ones ``skipped`` (``coalesced: ...``). Like
    APScheduler's ``coalesce=True`` and a Kubernetes CronJob after missed schedules."""
    ALL = "all"
    """Run every due slot within ``max_late``, one after another, in slot order."""
    NONE = "none"
    """Run only slots reached on time: record missed ones ``skipped`` (``late: ...``), and look
    back at nothing at start."""

    def __str__(self) -> str:
        return self.value


DEFAULT_CATCH_UP = CatchUp.LATEST


def parse_catch_up(value: object, *, where: str) -> CatchUp:
    """A `CatchUp` from its name, or a `ConfigError` naming `where` and the choices."""
    try:
        return CatchUp(value.strip().lower() if isinstance(value, str) else value)
    except ValueError:
        raise ConfigError(
            f"{where}: catch_up must be one of 'latest' (the default), 'all' or 'none', "
            f"got {value!r}"
        ) from None


def missed_skip(policy: CatchUp, newest: int) -> str:
    """The skip reason recorded for a missed slot under `policy` (never `ALL`), with `newest`
    the newest slot of the job already due."""
    if policy is CatchUp.LATEST:
        return f"coalesced: slot {newest} is due too; catch_up 'latest' runs only the newest"
    return f"late: slot {newest} is due too; catch_up 'none' runs no missed slot"


def late_skip(age_ms: int, max_late_ms: int) -> str:
    """The skip reason recorded for a slot the instance reached after ``max_late`` (the words
    of the lease stores' own late records, L1)."""
    return f"late: slot is {age_ms} ms old, max_late is {max_late_ms} ms"
