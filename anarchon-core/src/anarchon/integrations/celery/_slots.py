"""The slots of a beat entry, computed the same way on every beat node.

A slot is an instant in epoch milliseconds (UTC). An interval entry (``schedule``, a timedelta
or a number of seconds) has its slots at the multiples of its period counted from the Unix
epoch, so that nodes started at different times agree; a ``crontab`` entry has them at its fire
instants, computed by Celery's own crontab in the app's time zone.
"""

from __future__ import annotations

import hashlib
import re
from datetime import datetime, timedelta, timezone
from typing import Protocol

from celery.schedules import BaseSchedule, crontab, schedule
from celery.utils.time import remaining

from ..._claims import MAX_SLOT_MS
from ..._errors import ConfigError
from ..._names import NAME_PATTERN

__all__ = ["CrontabSlots", "EntrySlots", "IntervalSlots", "job_name", "slots_for"]

EPOCH = datetime(1970, 1, 1, tzinfo=timezone.utc)
_UNSAFE = re.compile(r"[^A-Za-z0-9_-]+")
_MINUTE_MS = 60_000


def to_ms(instant: datetime) -> int:
    """An aware datetime as epoch milliseconds, in integer arithmetic (no float rounding)."""
    delta = instant.astimezone(timezone.utc) - EPOCH
    return (delta.days * 86_400 + delta.seconds) * 1000 + delta.microseconds // 1000


def from_ms(ms: int) -> datetime:
    """Epoch milliseconds as an aware UTC datetime."""
    return EPOCH + timedelta(milliseconds=ms)


def job_name(entry_name: str) -> str:
    """The anarchon job name of a beat entry: the entry's name when it is a valid job name,
    else its letters, digits, ``_`` and ``-`` (runs of anything else become ``-``), cut to 88
    characters, plus ``-`` and 8 hex digits of its SHA-256, so that ``celery.backend_cleanup``
    becomes ``celery-backend_cleanup-<hash>`` and two entries never share a job."""
    if NAME_PATTERN.fullmatch(entry_name):
        return entry_name
    readable = _UNSAFE.sub("-", entry_name).strip("-_")[:88].strip("-_") or "entry"
    digest = hashlib.sha256(entry_name.encode("utf-8", "surrogatepass")).hexdigest()[:8]
    return f"{readable}-{digest}"


class EntrySlots(Protocol):
    """The slots of one entry."""

    def after(self, ms: int) -> int:
        """The first slot strictly after `ms`."""
        ...

    def latest(self, now_ms: int, *, since_ms: int) -> int | None:
        """The newest slot from `since_ms` to `now_ms` (both included), or None."""
        ...


class IntervalSlots:
    """Every `period_ms`, at the multiples of the period since the Unix epoch."""

    def __init__(self, period_ms: int) -> None:
        self.period_ms = period_ms

    def after(self, ms: int) -> int:
        return ms - ms % self.period_ms + self.period_ms

    def latest(self, now_ms: int, *, since_ms: int) -> int | None:
        slot = now_ms - now_ms % self.period_ms
        return slot if slot >= since_ms else None

    def __repr__(self) -> str:
        return f"IntervalSlots(period_ms={self.period_ms})"


class CrontabSlots:
    """The fire instants of a Celery `crontab`, in its time zone (the app's ``timezone``)."""

    def __init__(self, cron: crontab) -> None:
        self.cron = cron

    def _next_fire(self, ms: int) -> int:
        start, delta, _ = self.cron.remaining_delta(from_ms(ms))
        # `remaining` measured from the epoch is the fire instant itself.
        return to_ms(EPOCH + remaining(start, delta, now=EPOCH))

    def after(self, ms: int) -> int:
        probe = ms
        for _ in range(120):  # a crontab fires at whole minutes; DST folds may need a nudge
            fire = self._next_fire(probe)
            if fire > ms:
                return fire
            probe += _MINUTE_MS
        raise ConfigError(f"cannot find the next run of {self.cron!r} after {from_ms(ms)}")

    def latest(self, now_ms: int, *, since_ms: int) -> int | None:
        slot = self.after(since_ms - 1)
        if slot > now_ms:
            return None
        while (following := self.after(slot)) <= now_ms:
            slot = following
        return slot

    def __repr__(self) -> str:
        return f"CrontabSlots({self.cron!r})"


def slots_for(entry_name: str, entry_schedule: BaseSchedule | None) -> EntrySlots:
    """The slots of an entry's schedule, or `ConfigError` for a kind whose instants beat
    nodes cannot agree on (``solar``, custom schedule classes)."""
    if isinstance(entry_schedule, crontab):
        return CrontabSlots(entry_schedule)
    if isinstance(entry_schedule, schedule):
        seconds = float(entry_schedule.seconds)
        period_ms = round(seconds * 1000)
        if not 1 <= period_ms <= MAX_SLOT_MS:
            raise ConfigError(
                f"beat entry {entry_name!r}: its interval of {seconds} s is not from 1 ms to "
                "the year 9999; anarchon's beat scheduler counts interval slots in whole "
                "milliseconds"
            )
        return IntervalSlots(period_ms)
    raise ConfigError(
        f"beat entry {entry_name!r} has a {type(entry_schedule).__name__} schedule; anarchon's "
        "beat scheduler sends only interval entries (a number of seconds, a timedelta or "
        "celery.schedules.schedule) and crontab entries, whose slots every beat node computes "
        "alike. Use a crontab for this entry, or keep it on a beat that runs on one node only"
    )
