"""`FleetFallback`: the jobs of one slot this instance does not contend for (DESIGN section 12).

Each waits its grace after the slot, by the store-corrected clock, holding the job's next slots
back meanwhile (they must be decided in order). Then the jobs it watches are claimed (the claim
reads first: a decided slot costs a read, L10), and the silent ones are watched for departures:
at each heartbeat until the watch window ends, those whose contenders and watchers have all
left the list since the slot are claimed. So a slot whose contenders died, left, or never had
the job is still decided: a grace late when a watcher lives, a ttl late when none does. Past
its max_late, such a claim records the slot skipped (late): the slot is not silent in the
ledger either."""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable, MutableMapping, Sequence

import attrs

from .clock import StoreClock
from .fleet import Fleet, SlotPlan, fleet_grace_ms
from .jobs import JobSpec

__all__ = ["FleetFallback"]

ReadSlot = Callable[[Sequence[JobSpec], int, bool], Awaitable[None]]
"""Claims jobs of a slot after the slot: (specs, slot, orphan)."""


@attrs.define(kw_only=True)
class FleetFallback:
    """The later claims of one slot's watched and silent jobs, from the dispatcher's state."""

    fleet: Fleet
    clock: StoreClock
    stop: asyncio.Event
    deciding: MutableMapping[str, asyncio.Event]
    """The dispatcher's jobs whose last slot is still being decided (their next wait)."""
    read: ReadSlot

    async def run(self, plan: SlotPlan, slot: int) -> None:
        """Wait each job's grace and claim the watched ones; then watch the silent ones."""
        fleet = self.fleet
        specs = [*plan.watch, *plan.silent]
        watching = {spec.name for spec in plan.watch}
        deciding = asyncio.Event()
        for spec in specs:
            self.deciding[spec.name] = deciding
        try:
            for grace in sorted({fleet_grace_ms(fleet.grace_ms, spec) for spec in specs}):
                if await self._stopped_within(slot + grace - self.clock.now_ms()):
                    return
                group = [s for s in specs if fleet_grace_ms(fleet.grace_ms, s) == grace]
                watched = [s for s in group if s.name in watching]
                if watched:
                    await self.read(watched, slot, False)
                self._release(group, deciding)
        finally:
            deciding.set()
            self._release(specs, deciding)
        if plan.silent and not self.stop.is_set():
            await self._watch_departures(plan, slot)

    async def _watch_departures(self, plan: SlotPlan, slot: int) -> None:
        pending = list(plan.silent)
        until_ms = slot + plan.watch_ms
        while pending and not self.stop.is_set():
            left_ms = until_ms - self.clock.now_ms()
            if left_ms <= 0:
                return
            await self.fleet.next_beat(left_ms / 1000)
            orphans = self.fleet.orphans(plan, pending, slot)
            if orphans and not self.stop.is_set():
                claimed = {spec.name for spec in orphans}
                pending = [s for s in pending if s.name not in claimed]
                await self.read(orphans, slot, True)

    async def _stopped_within(self, wait_ms: int) -> bool:
        try:
            await asyncio.wait_for(self.stop.wait(), max(wait_ms, 0) / 1000)
        except asyncio.TimeoutError:
            return False
        return True

    def _release(self, specs: Sequence[JobSpec], deciding: asyncio.Event) -> None:
        for spec in specs:
            if self.deciding.get(spec.name) is deciding:
                del self.deciding[spec.name]
