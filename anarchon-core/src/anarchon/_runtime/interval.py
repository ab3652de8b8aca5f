"""Interval schedules: ``every="30s"``, with an optional ``offset`` (issue #26).

The slots are ``k * every + offset`` in epoch milliseconds, for every integer ``k``: aligned to
the Unix epoch, so every instance computes the same slots from its settings alone, whenever it
started. They are UTC instants by construction: time zones and daylight saving do not apply
(``every="1d"`` fires at 00:00 UTC every day, ``every="1d", offset="6h"`` at 06:00 UTC); a job
that must follow a wall clock in a zone takes a cron expression instead.

Intervals are whole seconds, from one second up, like the slots of a cron expression; the
offset is whole seconds too, from 0 up to (not including) the interval.
"""

from __future__ import annotations

from datetime import datetime, timezone

import attrs

from .._claims import MAX_SLOT_MS
from .._durations import DurationLike, to_ms
from .._errors import ConfigError
from .._names import shown
from .cron import Schedule, SlotInfo, SlotWalk
from .cron_fields import EARLIEST_MS, EndOfTime

__all__ = ["MIN_EVERY_MS", "Interval", "JobSchedule", "duration_text"]

MIN_EVERY_MS = 1000
"""The shortest interval: one second, the granularity of cron slots too."""

_UNITS = (("d", 86_400_000), ("h", 3_600_000), ("m", 60_000), ("s", 1000), ("ms", 1))


def duration_text(ms: int) -> str:
    """``90_000`` as ``"1m30s"``: the short form `to_ms` reads back."""
    if ms == 0:
        return "0s"
    parts = []
    for unit, size in _UNITS:
        count, ms = divmod(ms, size)
        if count:
            parts.append(f"{count}{unit}")
    return "".join(parts)


def _whole_seconds(value: DurationLike, what: str, *, allow_zero: bool) -> int:
    ms = to_ms(value, what=what, allow_zero=allow_zero)
    if ms % 1000:
        nearest = "'1s'" if ms < 1000 else f"'{ms // 1000}s' or '{ms // 1000 + 1}s'"
        raise ConfigError(
            f"{what} {shown(value)} is {ms} ms, not whole seconds; interval slots fall on whole "
            f"seconds, like cron slots: write for example {nearest}"
        )
    return ms


@attrs.frozen(kw_only=True)
class Interval(SlotWalk):
    """Every `every_ms` milliseconds from the Unix epoch, shifted by `offset_ms`; create it
    with `Interval.parse`."""

    every_ms: int
    offset_ms: int = 0

    def __attrs_post_init__(self) -> None:
        for name, value in (("every_ms", self.every_ms), ("offset_ms", self.offset_ms)):
            if isinstance(value, bool) or not isinstance(value, int):
                raise ConfigError(f"an interval's {name} must be an int, got {shown(value)}")
        if self.every_ms < MIN_EVERY_MS or self.every_ms % 1000:
            raise ConfigError(
                f"an interval of {self.every_ms} ms: intervals are whole seconds, at least 1 s"
            )
        if not 0 <= self.offset_ms < self.every_ms or self.offset_ms % 1000:
            raise ConfigError(
                f"an offset of {self.offset_ms} ms: offsets are whole seconds from 0 up to the "
                f"interval ({self.every_ms} ms), not including it"
            )

    @classmethod
    def parse(
        cls,
        every: DurationLike,
        offset: DurationLike | None = None,
        *,
        where: str = "",
        names: tuple[str, str] = ("every", "offset"),
    ) -> Interval:
        """Validate ``every`` and ``offset`` (durations: int ms, `timedelta`, or ``"30s"``,
        ``"2m"``, ``"1h30m"``), or raise `ConfigError` naming the setting and the fix.
        `where` (``"job 'x'"``) starts the messages; `names` are the settings' names in them
        (``("--every", "--offset")`` on the command line)."""
        lead = f"{where}: " if where else ""
        every_name, offset_name = names
        every_ms = _whole_seconds(every, f"{lead}{every_name}", allow_zero=False)
        offset_ms = 0
        if offset is not None:
            offset_ms = _whole_seconds(offset, f"{lead}{offset_name}", allow_zero=True)
            if offset_ms >= every_ms:
                raise ConfigError(
                    f"{lead}{offset_name} {shown(offset)} is not shorter than {every_name} "
                    f"{shown(every)}: "
                    f"the offset shifts the slots within one interval, from 0 up to "
                    f"{duration_text(every_ms - 1000)} here"
                )
        return cls(every_ms=every_ms, offset_ms=offset_ms)

    def __str__(self) -> str:
        return self.text

    @property
    def text(self) -> str:
        """``every 30s``, or ``every 1h offset 15m``: how the schedule is shown (dashboard,
        ``anarchon next``)."""
        shift = f" offset {duration_text(self.offset_ms)}" if self.offset_ms else ""
        return f"every {duration_text(self.every_ms)}{shift}"

    def describe(self) -> str:
        """The interval and what its slots are aligned to."""
        return f"{self.text} (UTC, aligned to the Unix epoch)"

    # -- slots ----------------------------------------------------------------------------

    def next_slot(self, after_ms: int) -> int:
        """The first slot strictly after ``after_ms`` (epoch milliseconds), with the bounds of
        `Schedule.next_slot`: ``after_ms`` from `EARLIEST_MS` (year 1000) to `MAX_SLOT_MS`,
        and `EndOfTime` when no slot is left before the end of year 9999."""
        if isinstance(after_ms, bool) or not isinstance(after_ms, int):
            raise ConfigError(
                f"after_ms must be epoch milliseconds (an int), got {shown(after_ms)}"
            )
        if after_ms < EARLIEST_MS:
            raise ConfigError(
                f"after_ms {after_ms} is before the year 1000; schedules look from 1000 to 9999"
            )
        slot = ((after_ms - self.offset_ms) // self.every_ms + 1) * self.every_ms + self.offset_ms
        if slot > MAX_SLOT_MS:
            raise EndOfTime(
                f"schedule {self}: no slot after {after_ms} ms before the end of year 9999, the "
                f"last time anarchon schedules (slot {MAX_SLOT_MS}); give an earlier time"
            )
        return slot

    def upcoming(self, n: int, after_ms: int) -> list[SlotInfo]:
        """The next ``n`` slots after ``after_ms``, for people; local times are UTC and no
        slot has a daylight saving note. Fewer when the end of year 9999 comes first."""
        infos: list[SlotInfo] = []
        previous = after_ms
        for _ in range(n):
            try:
                slot = self.next_slot(previous)
            except EndOfTime:
                break
            utc = datetime.fromtimestamp(slot // 1000, timezone.utc)
            infos.append(SlotInfo(slot_ms=slot, utc=utc, local=utc, dst_note=""))
            previous = slot
        return infos


JobSchedule = Schedule | Interval
"""A job's schedule: a cron expression in a zone, or an interval."""
