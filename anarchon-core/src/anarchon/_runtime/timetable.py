"""`Timetable`: the next slot of every job, in fire order, and when to prepare each (T2, T5, T6).

The dispatcher asks it what is due by the store-corrected clock; it never answers a slot before
its time and answers each job's slots in increasing order (so a backward jump of the wall clock
never fires one twice, T5). Slots that turned late (a forward jump, a stalled loop, a long wait
for the store) come out together, the newest `LATE_RECORDS_MAX` of them per job, so that the
dispatcher records them skipped (the ledger) instead of dropping them silently.
"""

from __future__ import annotations

import heapq
import logging
from collections.abc import Mapping

import attrs

from .catch_up import LATE_RECORDS_MAX, CatchUp
from .interval import JobSchedule
from .jobs import JobSpec

__all__ = ["LATE_SCAN_MAX", "MIN_PREPARE_LEAD_MS", "Due", "Timetable"]

log = logging.getLogger("anarchon.scheduler")

MIN_PREPARE_LEAD_MS = 50
"""A slot closer than this when its preparation comes due is not prepared: its claims would
arrive with the preparation and gain nothing from it."""
LATE_SCAN_MAX = 100_000
"""Late slots of one job counted one by one after a stall, at most (then the count is given as
'more than')."""


@attrs.frozen
class Due:
    """What came due at `slot`: the jobs that may still claim it (`fresh`), and per job the late
    slots (older than ``max_late`` plus clock skew) to record as skipped, oldest first."""

    slot: int
    fresh: list[JobSpec]
    late: dict[str, list[int]] = attrs.field(factory=dict)


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
        since_ms: int | None = None,
    ) -> None:
        """`since_ms`: when the instance came up (store clock; default `now_ms`). Each job starts
        from the first slot after ``since_ms - max_late`` (T6; catch_up ``none``: after
        ``since_ms``), so the slots that fell due while it waited for the store are decided too."""
        self._jobs = {name: spec for name, spec in jobs.items() if spec.schedule is not None}
        self._schedules: dict[str, JobSchedule] = {
            name: spec.schedule for name, spec in self._jobs.items() if spec.schedule is not None
        }
        self._skew_ms = clock_skew_ms
        self._ahead_ms = prepare_ahead_ms
        self._slots: list[tuple[int, str]] = []
        self._prepares: list[tuple[int, int, str]] = []
        since = now_ms if since_ms is None else min(since_ms, now_ms)
        # T6: slots within max_late before the start are claimed at start (and never prepared).
        for name, spec in self._jobs.items():
            back = 0 if spec.catch_up is CatchUp.NONE else spec.max_late_ms
            self._push(name, self._schedules[name].next_slot(since - back - 1))

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

    def slot_due(self, now_ms: int) -> Due | None:
        """The earliest slot if it has come, with its jobs; each of those jobs moves on to its
        next slot. A job for which the slot is already late (by more than ``max_late`` plus
        clock skew) gives all its late slots at once, the newest `LATE_RECORDS_MAX` of them
        (the older ones are logged), and moves on to its first slot that is not late."""
        if not self._slots or self._slots[0][0] > now_ms:
            return None
        slot = self._slots[0][0]
        due = Due(slot, [])
        while self._slots and self._slots[0][0] == slot:
            _, name = heapq.heappop(self._slots)
            spec = self._jobs[name]
            schedule = self._schedules[name]
            horizon = now_ms - spec.max_late_ms - self._skew_ms
            if slot >= horizon:
                due.fresh.append(spec)
                self._push(name, schedule.next_slot(slot))
                continue
            late = [slot]
            nxt = schedule.next_slot(slot)
            while nxt < horizon and len(late) < LATE_SCAN_MAX:
                late.append(nxt)
                nxt = schedule.next_slot(nxt)
            if nxt < horizon:
                nxt = schedule.next_slot(horizon - 1)
            if len(late) > LATE_RECORDS_MAX:
                log.warning(
                    "job %s: %s%d slots from %s were later than max_late (%d ms) and are not "
                    "recorded; the newest %d are recorded skipped",
                    spec.name,
                    "more than " if len(late) >= LATE_SCAN_MAX else "",
                    len(late) - LATE_RECORDS_MAX,
                    slot,
                    spec.max_late_ms,
                    LATE_RECORDS_MAX,
                    extra={"job": spec.name, "slot": slot, "outcome": "late"},
                )
                late = late[-LATE_RECORDS_MAX:]
            due.late[name] = late
            self._push(name, nxt)
        return due
