"""`StartedScheduler`: what the ``anarchon_scheduler_started`` hook tells observers."""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING

import attrs

if TYPE_CHECKING:
    from .._runtime.health import Health

__all__ = ["StartedScheduler"]


@attrs.frozen(kw_only=True)
class StartedScheduler:
    """A read-only view of the scheduler that just started: who it is, where it claims, which
    jobs it runs, and its `health()` from now on."""

    instance: str
    """This instance's id (in history and logs)."""
    store: str
    """The store URL, password redacted."""
    jobs: tuple[str, ...]
    """The names of its jobs."""
    read_health: Callable[[], Health] = attrs.field(repr=False)

    def health(self) -> Health:
        """The scheduler's `Health` now (`Scheduler.health()`)."""
        return self.read_health()
