"""F1 against a store clock that steps: while this instance runs jobs on a lease store, it
watches the store's clock against its own monotonic clock.

Leases are judged by the store's clock (T1), and a runner counts its lease on the monotonic
clock (F1). If the store's clock steps forward by D (an operator's `date -s`, a VM restored, NTP
stepping instead of slewing), the store sees every lease end D earlier than its runner does, and
a backup may take a run over while its runner still works. The watch reads the store's clock
every few tenths of a heartbeat; when it has moved more than the monotonic clock allows, it
shortens every running lease by the step, which fences at once the runs whose lease the store
may already give away. Between a step and the next reading a backup can still win: a
resource that must never be written twice takes the run's fencing token (F2).
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable, Collection

from .clock import LocalClock
from .execution import Execution

__all__ = ["STEP_TOLERANCE_MS", "ClockWatch"]

log = logging.getLogger("anarchon.run")

STEP_TOLERANCE_MS = 50
"""Drift between the store's clock and the monotonic clock that is not yet a step, on top of
the reading's round trip (network jitter, a busy event loop)."""
MIN_INTERVAL_S = 0.05


class ClockWatch:
    """Reads the store's clock while runs execute here; shortens their leases on a step."""

    def __init__(
        self,
        read_store: Callable[[], Awaitable[int | None]],
        executions: Collection[Execution],
        local: LocalClock,
        *,
        on_step: Callable[[int], None] | None = None,
    ) -> None:
        self.read_store = read_store
        self.executions = executions
        self.local = local
        self.on_step = on_step
        self.steps: list[int] = []
        """Every step seen (ms, forward positive), for health and tests."""

    async def _sample(self) -> tuple[float, float] | None:
        """(store clock - monotonic clock, round trip), both in ms; None without a store clock."""
        sent = self.local.monotonic()
        store_now = await self.read_store()
        back = self.local.monotonic()
        if store_now is None:
            return None
        return store_now - (sent + back) * 500, (back - sent) * 1000

    async def run(self) -> None:
        """Watch until no run executes here; the caller starts it again with the next run."""
        first = await self._sample()
        if first is None:
            return
        baseline = first[0]
        while self.executions:
            leases = [e.spec.heartbeat_ms for e in self.executions if e.run.deadline is not None]
            if not leases:
                return
            await asyncio.sleep(max(min(leases) / 3000, MIN_INTERVAL_S))
            sample = await self._sample()
            if sample is None:
                return
            offset, rtt = sample
            step = round(offset - baseline)
            if abs(step) <= STEP_TOLERANCE_MS + rtt:
                continue
            baseline = offset
            self.steps.append(step)
            if self.on_step is not None:
                self.on_step(step)
            if step < 0:
                log.info(
                    "the store's clock stepped back by %d ms; leases last longer in the store "
                    "than here, which is safe",
                    -step,
                    extra={"step_ms": step},
                )
                continue
            log.warning(
                "the store's clock stepped forward by %d ms: the store ends every lease that "
                "much earlier than this instance counted; running leases shortened (F1), runs "
                "whose lease the store may give away are fenced",
                step,
                extra={"step_ms": step},
            )
            for execution in list(self.executions):
                execution.store_clock_stepped(step)
