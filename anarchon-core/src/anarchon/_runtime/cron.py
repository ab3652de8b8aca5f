"""Schedules: the slots of a cron expression in a time zone (DESIGN.md rule T7).

A slot is an ``int`` of epoch milliseconds (UTC). Expressions have 5 fields (minute hour
day-of-month month day-of-week) or 6 with seconds first, or are one of the aliases in `ALIASES`.

Daylight saving follows Vixie cron / cronie. If the hour field covers every hour (``*``, ``*/n``,
``0-23``, ``0-23/n``, ``0/n``: one term whose range is all of 0-23) the schedule follows real
time: it fires whenever the wall clock shows a matching time, so in both passes of a repeated hour
and never in a skipped one. Otherwise (fixed hours) each matching wall time fires once: at its
first occurrence if it happens twice, and at the first instant after the gap if it does not exist
(several skipped wall times then share that one slot).

Fields hold ``*`` (or ``?``), values, ranges ``a-b``, steps ``*/n``, ``a-b/n``, ``a/n`` (a to
the end), lists, month and weekday names; day-of-week 0 and 7 are Sunday. As in Vixie cron, if
both day fields are restricted (neither starts with ``*``) a day matching either one fires;
otherwise a day must match both. ``L``, ``W`` and ``#`` are not supported.
"""

from __future__ import annotations

import bisect
from collections.abc import Iterator
from datetime import date, datetime, timedelta, timezone
from zoneinfo import ZoneInfo, ZoneInfoNotFoundError

import attrs

from .._claims import MAX_SLOT_MS
from .._errors import ConfigError
from .._names import shown
from .cron_fields import (
    ALIASES,
    DAY,
    EARLIEST_MS,
    EPOCH_DAY,
    FIELDS,
    FORMAT,
    LONGEST_EXPRESSION,
    MAX_DAYS,
    UTC_NAMES,
    EndOfTime,
    clock_text,
    first_change,
    parse_field,
    zone_offset,
)

__all__ = ["ALIASES", "EARLIEST_MS", "Schedule", "SlotInfo"]


@attrs.frozen(kw_only=True)
class SlotInfo:
    """One upcoming slot, for people: see `Schedule.upcoming`."""

    slot_ms: int
    utc: datetime
    local: datetime
    dst_note: str
    """Empty, or what daylight saving did to this slot, e.g. ``"first of two 02:30 (fold)"``."""


class SlotWalk:
    """What every schedule (`Schedule`, `interval.Interval`) derives from its `next_slot`."""

    __slots__ = ()

    def next_slot(self, after_ms: int) -> int:
        raise NotImplementedError

    def slots_between(self, start_ms: int, end_ms: int) -> Iterator[int]:
        """The slots in (start_ms, end_ms], ascending: start exclusive, end inclusive (and at
        most `MAX_SLOT_MS`)."""
        slot = start_ms
        while True:
            try:
                slot = self.next_slot(slot)
            except EndOfTime:
                return
            if slot > end_ms:
                return
            yield slot

    def previous_slots(self, now_ms: int, window_ms: int) -> list[int]:
        """The slots in (now_ms - window_ms, now_ms], ascending: the catch-up of rule T6."""
        if window_ms < 0:
            raise ConfigError(f"the catch-up window must not be negative, got {window_ms} ms")
        return list(self.slots_between(now_ms - window_ms, now_ms))


@attrs.frozen(kw_only=True)
class Schedule(SlotWalk):
    """A cron expression in an IANA time zone; create it with `Schedule.parse`."""

    expression: str
    tz: str = "UTC"
    follows_real_time: bool = attrs.field(init=False, eq=False)
    """True when the hour field covers every hour: such schedules follow real time (T7)."""
    _zone: ZoneInfo = attrs.field(init=False, eq=False, repr=False)
    _fields: tuple[tuple[int, ...], ...] = attrs.field(init=False, eq=False, repr=False)
    _any_day: bool = attrs.field(init=False, eq=False, repr=False)

    def __attrs_post_init__(self) -> None:
        if not isinstance(self.expression, str) or not isinstance(self.tz, str):
            raise ConfigError("a schedule needs a cron expression and a time zone name as strings")
        if len(self.expression) > LONGEST_EXPRESSION:
            raise ConfigError(
                f"cron expression {shown(self.expression)} is {len(self.expression)} characters "
                f"long (at most {LONGEST_EXPRESSION}); write {FORMAT}"
            )
        text = ALIASES.get(self.expression.strip().lower(), self.expression)
        parts = text.split()
        if not parts:
            raise ConfigError(f"the cron expression is empty; write {FORMAT}")
        if parts[0].startswith("@"):
            raise ConfigError(
                f"cron expression {self.expression!r}: unknown alias {parts[0]!r}; "
                f"use one of {', '.join(ALIASES)} or write {FORMAT}"
            )
        if len(parts) not in (5, 6):
            raise ConfigError(
                f"cron expression {self.expression!r} has {len(parts)} fields; write {FORMAT}"
            )
        if len(parts) == 5:
            parts.insert(0, "0")
        fields = tuple(
            parse_field(self.expression, name, part)
            for name, part in zip(FIELDS, parts, strict=True)
        )
        # Vixie cron: a day field starting with '*' does not restrict; two restricted ones OR.
        dom_star, dow_star = parts[3][0] in "*?", parts[5][0] in "*?"
        if dow_star and not any(d <= MAX_DAYS[m - 1] for m in fields[4] for d in fields[3]):
            raise ConfigError(
                f"cron expression {self.expression!r} never fires: no chosen month has day "
                f"{parts[3]}; pick days that exist, for example '1' or '28'"
            )
        hour_range, step, _ = parts[2].partition("/")
        every_hour = hour_range in ("*", "?", "0-23") or (hour_range == "0" and step == "/")
        if not self.tz or "\0" in self.tz:
            raise ConfigError(
                f"time zone {self.tz!r} is not a zone name; use an IANA name like 'Europe/Berlin'"
            )
        try:
            zone = ZoneInfo(self.tz)
        except (ZoneInfoNotFoundError, ValueError, OSError):
            raise ConfigError(
                f"unknown time zone {self.tz!r}; use an IANA name like 'Europe/Berlin' or 'UTC'"
            ) from None
        object.__setattr__(self, "follows_real_time", "," not in parts[2] and every_hour)
        object.__setattr__(self, "_zone", zone)
        object.__setattr__(self, "_fields", fields)
        object.__setattr__(self, "_any_day", dom_star or dow_star)

    @classmethod
    def parse(cls, cron: str, tz: str = "UTC") -> Schedule:
        """Parse and validate ``cron`` in zone ``tz``, or raise `ConfigError` saying what to fix."""
        return cls(expression=cron, tz=tz)

    def __str__(self) -> str:
        return f"{self.expression} in {self.tz}"

    @property
    def text(self) -> str:
        """``*/5 * * * * (UTC)``: how the schedule is shown (dashboard); an `Interval` shows
        ``every 30s``."""
        return f"{self.expression} ({self.tz})"

    def describe(self) -> str:
        """The expression, the zone and how the schedule treats daylight saving changes."""
        if self.follows_real_time or self.tz in UTC_NAMES:
            rule = (
                "follows real time: fires in both passes of a repeated hour, not in a skipped one"
            )
        else:
            rule = "fixed hours: a repeated time fires once, a skipped one right after the gap"
        return f"'{self.expression}' in {self.tz} ({rule})"

    # -- slots ----------------------------------------------------------------------------

    def next_slot(self, after_ms: int) -> int:
        """The first slot strictly after ``after_ms`` (epoch milliseconds).

        ``after_ms`` is an int from `EARLIEST_MS` (year 1000) to `MAX_SLOT_MS` (the end of year
        9999); `ConfigError` outside that, and when the schedule has no slot left before the
        end of year 9999."""
        if isinstance(after_ms, bool) or not isinstance(after_ms, int):
            raise ConfigError(
                f"after_ms must be epoch milliseconds (an int), got {shown(after_ms)}"
            )
        if not EARLIEST_MS <= after_ms < MAX_SLOT_MS:
            if after_ms >= MAX_SLOT_MS:
                raise self._end_of_time(after_ms)
            raise ConfigError(
                f"after_ms {after_ms} is before the year 1000; schedules look from 1000 to 9999"
            )
        try:
            slot = self._next_slot(after_ms)
        except ConfigError:
            raise
        except (ValueError, OverflowError):  # a date past year 9999 (the earliest is year 1000)
            raise self._end_of_time(after_ms) from None
        if slot > MAX_SLOT_MS:
            raise self._end_of_time(after_ms)
        return slot

    def _end_of_time(self, after_ms: int) -> EndOfTime:
        return EndOfTime(
            f"schedule {self}: no slot after {after_ms} ms before the end of year 9999, the last "
            f"time anarchon schedules (slot {MAX_SLOT_MS}); give an earlier time"
        )

    def _next_slot(self, after_ms: int) -> int:
        start = after_ms // 1000 + 1  # slots are whole seconds
        if self.tz in UTC_NAMES:
            return self._next_wall(start) * 1000
        zone = self._zone
        if self.follows_real_time:
            while True:
                offset = zone_offset(zone, start)
                slot = self._next_wall(start + offset) - offset
                change = first_change(zone, start, slot, offset)
                if change is None:
                    return slot * 1000
                start = change
        offset = zone_offset(zone, start - 1)
        wall = start + offset
        if datetime.fromtimestamp(start - 1, zone).fold:
            # In the second pass of a repeated hour its wall times fired in the first pass:
            # go on from the wall time the clock showed when it was turned back.
            earlier = zone_offset(zone, start - 1 - DAY)
            turned = first_change(zone, start - 1 - DAY, start - 1, earlier)
            assert turned is not None
            wall = turned + earlier
        while True:
            wall = self._next_wall(wall)
            slot = self._first_instant(wall)
            if slot >= start:
                return slot * 1000
            wall += 1

    def upcoming(self, n: int, after_ms: int) -> list[SlotInfo]:
        """The next ``n`` slots after ``after_ms`` with their UTC and local times, for people.

        Fewer (or none) when the schedule reaches the end of year 9999 first."""
        infos: list[SlotInfo] = []
        previous = after_ms
        for _ in range(n):
            try:
                slot = self.next_slot(previous)
            except EndOfTime:
                break
            local = datetime.fromtimestamp(slot // 1000, self._zone)
            infos.append(
                SlotInfo(
                    slot_ms=slot,
                    utc=datetime.fromtimestamp(slot // 1000, timezone.utc),
                    local=local,
                    dst_note=self._dst_note(local, previous // 1000),
                )
            )
            previous = slot
        return infos

    # -- internals ------------------------------------------------------------------------

    def _first_instant(self, wall: int) -> int:
        """The first instant whose wall time is ``wall``, or the end of the gap it falls in."""
        days, seconds = divmod(wall, DAY)
        hour, rest = divmod(seconds, 3600)
        d = date.fromordinal(days + EPOCH_DAY)
        local = datetime(d.year, d.month, d.day, hour, rest // 60, rest % 60, tzinfo=self._zone)
        offsets = [local.utcoffset(), local.replace(fold=1).utcoffset()]
        first, second = (o.days * DAY + o.seconds for o in offsets if o is not None)
        if zone_offset(self._zone, wall - first) == first:
            return wall - first
        before = wall - max(first, second)  # an instant just before the gap
        change = first_change(
            self._zone, before, wall - min(first, second), zone_offset(self._zone, before)
        )
        assert change is not None
        return change

    def _day_matches(self, d: date) -> bool:
        _, _, _, days, _, weekdays = self._fields
        dom = d.day in days
        dow = d.isoweekday() % 7 in weekdays
        return (dom and dow) if self._any_day else (dom or dow)

    def _next_wall(self, wall: int) -> int:
        """The first matching wall time at or after ``wall`` (seconds, as if the zone were UTC)."""
        seconds, minutes, hours, _, months, _ = self._fields
        days, rest = divmod(wall, DAY)
        hour, rest = divmod(rest, 3600)
        minute, second = divmod(rest, 60)
        d = date.fromordinal(days + EPOCH_DAY)
        last_year = d.year + 400  # every (month, day, weekday) recurs in the 400-year cycle
        while d.year <= last_year:
            if d.month not in months:
                later = [m for m in months if m > d.month]
                d = date(d.year, later[0], 1) if later else date(d.year + 1, months[0], 1)
                hour = minute = second = 0
                continue
            if self._day_matches(d):
                midnight = (d.toordinal() - EPOCH_DAY) * DAY
                h = bisect.bisect_left(hours, hour)
                if h < len(hours) and hours[h] == hour:
                    m = bisect.bisect_left(minutes, minute)
                    if m < len(minutes) and minutes[m] == minute:
                        s = bisect.bisect_left(seconds, second)
                        if s < len(seconds):
                            return midnight + hour * 3600 + minute * 60 + seconds[s]
                        m += 1
                    if m < len(minutes):
                        return midnight + hour * 3600 + minutes[m] * 60 + seconds[0]
                    h += 1
                if h < len(hours):
                    return midnight + hours[h] * 3600 + minutes[0] * 60 + seconds[0]
            d += timedelta(days=1)
            hour = minute = second = 0
        raise AssertionError(f"{self} found no slot in 400 years")  # parse rules this out

    def _dst_note(self, local: datetime, previous: int) -> str:
        """What daylight saving did to the slot at ``local`` (reached from ``previous``)."""
        zone, slot = self._zone, int(local.timestamp())
        if local.utcoffset() != local.replace(fold=1 - local.fold).utcoffset():
            if local.fold:
                return f"second {clock_text(local)} (fold): the hour field follows real time"
            if self.follows_real_time:
                return f"first of two {clock_text(local)} (fold)"
            return f"first of two {clock_text(local)} (fold); the repeat does not fire"
        # A fixed-hour slot stands in for skipped times only at the end of a gap; a real-time
        # slot reports the last gap since the previous slot.
        low = previous if self.follows_real_time else slot - 1
        offset, skipped = zone_offset(zone, low), list[int]()
        while (change := first_change(zone, low, slot, offset)) is not None:
            low, before, offset = change, offset, zone_offset(zone, change)
            gap, wall = [], self._next_wall(change + before)
            while wall < change + offset:  # empty unless the clock jumped forward
                gap.append(wall)
                wall = self._next_wall(wall + 1)
            skipped = gap or skipped
        if not skipped:
            return ""

        def clock(wall: int) -> str:
            return clock_text(datetime.fromtimestamp(wall, timezone.utc))

        what = clock(skipped[0]) + (f" to {clock(skipped[-1])}" if len(skipped) > 1 else "")
        verb = "does not exist" if len(skipped) == 1 else "do not exist"
        if self.follows_real_time:
            return f"{what} {verb} (gap); skipped, the hour field follows real time"
        return f"{what} {verb}; fired at {clock_text(local)} after the gap"
