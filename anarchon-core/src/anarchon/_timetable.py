"""`Timetable`: the next slot of every job, in fire order, and when to prepare each (T2, T5, T6).

The dispatcher asks it what is due by the store-corrected clock; it never answers a slot before
its time, answers each job's slots in increasing order (so a backward jump of the wall clock
never fires one twice, T5), and skips at once every slot that turned late (a forward jump or a
stalled loop).
"""

from __future__ import annotations

import heapq
import logging
from collections.abc import Mapping

from ._jobs import JobSpec
from ._schedule import Schedule

__all__ = ["MIN_PREPARE_LEAD_MS", "Timetable"]

log = logging.getLogger("anarchon.scheduler")

MIN_PREPARE_LEAD_MS = 50
"""A slot closer than this when its preparation comes due is not prepared: its claims would
arrive with the preparation and gain nothing from it."""


class Timetable:
    """Per job the next slot to fire; per slot, when to prepare it (``prepare_ahead_ms`` before,
    0 for stores that prepare nothing)."""

    def __init__(
        self,
        jobs: Mapping[str, JobSpec],
        now_ms: int,
        *,
        clock_skew_ms: int,
        prepare_ahead_ms: int = 0,
    ) -> None:
        self._jobs = {name: spec for name, spec in jobs.items() if spec.schedule is not None}
        self._schedules: dict[str, Schedule] = {
            name: spec.schedule for name, spec in self._jobs.items() if spec.schedule is not None
        }
        self._skew_ms = clock_skew_ms
        self._ahead_ms = prepare_ahead_ms
        self._slots: list[tuple[int, str]] = []
        self._prepares: list[tuple[int, int, str]] = []
        # T6: slots within max_late before now are claimed at start (and never prepared).
        for name, spec in self._jobs.items():
            self._push(name, self._schedules[name].next_slot(now_ms - spec.max_late_ms - 1))

    def __bool__(self) -> bool:
        return bool(self._slots)

    def _push(self, name: str, slot: int) -> None:
        heapq.heappush(self._slots, (slot, name))
        if self._ahead_ms > 0:
            heapq.heappush(self._prepares, (slot - self._ahead_ms, slot, name))

    def wake_at(self) -> int | None:
        """The store-clock time of the next slot or preparation, None if nothing is scheduled."""
        times = [self._slots[0][0]] if self._slots else []
        if self._prepares:
            times.append(self._prepares[0][0])
        return min(times) if times else None

    def prepares_due(self, now_ms: int) -> list[tuple[int, list[str]]]:
        """The slots whose preparation time has come, each with its jobs, in slot order; slots
        already (or almost) due are dropped: their claims go out now anyway."""
        due: dict[int, list[str]] = {}
        while self._prepares and self._prepares[0][0] <= now_ms:
            _, slot, name = heapq.heappop(self._prepares)
            if slot - now_ms >= MIN_PREPARE_LEAD_MS:
                due.setdefault(slot, []).append(name)
        return sorted(due.items())

    def slot_due(self, now_ms: int) -> tuple[int, list[JobSpec]] | None:
        """The earliest slot if it has come, with its jobs that may still claim it; each of
        those jobs moves on to its next slot. A job for which the slot is already late (by more
        than ``max_late`` plus clock skew) skips every late slot at once, with one log line."""
        if not self._slots or self._slots[0][0] > now_ms:
            return None
        slot = self._slots[0][0]
        fresh: list[JobSpec] = []
        while self._slots and self._slots[0][0] == slot:
            _, name = heapq.heappop(self._slots)
            spec = self._jobs[name]
            horizon = now_ms - spec.max_late_ms - self._skew_ms
            if slot >= horizon:
                fresh.append(spec)
                self._push(name, self._schedules[name].next_slot(slot))
                continue
            resume = self._schedules[name].next_slot(horizon - 1)
            log.info(
                "job %s: slots from %s to before %s skipped: later than max_late (%d ms)",
                spec.name,
                slot,
                resume,
                spec.max_late_ms,
                extra={"job": spec.name, "slot": slot, "outcome": "late"},
            )
            self._push(name, resume)
        return slot, fresh
