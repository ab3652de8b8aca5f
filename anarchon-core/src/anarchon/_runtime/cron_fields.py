"""The fields of a cron expression (see `anarchon._runtime.cron` for the syntax and the rules),
and the time-zone arithmetic `Schedule` walks them with."""

from __future__ import annotations

import re
from datetime import date, datetime
from zoneinfo import ZoneInfo

from .._errors import ConfigError
from .._names import shown

__all__ = [
    "ALIASES",
    "DAY",
    "EARLIEST_MS",
    "EPOCH_DAY",
    "FIELDS",
    "FORMAT",
    "LONGEST_EXPRESSION",
    "MAX_DAYS",
    "UTC_NAMES",
    "EndOfTime",
    "clock_text",
    "first_change",
    "parse_field",
    "zone_offset",
]

ALIASES = {
    "@yearly": "0 0 1 1 *",
    "@annually": "0 0 1 1 *",
    "@monthly": "0 0 1 * *",
    "@weekly": "0 0 * * 0",
    "@daily": "0 0 * * *",
    "@midnight": "0 0 * * *",
    "@hourly": "0 * * * *",
}
"""The cron aliases anarchon accepts, and the 5-field expression each stands for."""

DAY = 86_400
EPOCH_DAY = date(1970, 1, 1).toordinal()
UTC_NAMES = frozenset({"UTC", "Etc/UTC", "Etc/UCT", "Etc/Universal", "Etc/Zulu", "GMT", "Etc/GMT"})
FORMAT = (
    "5 fields 'minute hour day-of-month month day-of-week' like '30 2 * * *', "
    "or 6 with seconds first like '0 30 2 * * *'"
)
MONTHS = ["JAN", "FEB", "MAR", "APR", "MAY", "JUN", "JUL", "AUG", "SEP", "OCT", "NOV", "DEC"]
WEEKDAYS = ["SUN", "MON", "TUE", "WED", "THU", "FRI", "SAT"]
# name, lowest, highest, names for values, example
FIELDS = {
    "second": (0, 59, {}, "'0', '*/10' or '0,30'"),
    "minute": (0, 59, {}, "'0', '*/15' or '5-10'"),
    "hour": (0, 23, {}, "'*', '2' or '9-17'"),
    "day-of-month": (1, 31, {}, "'*', '1' or '1,15'"),
    "month": (1, 12, {n: i + 1 for i, n in enumerate(MONTHS)}, "'*', '1-6' or 'JAN,JUL'"),
    "day-of-week": (0, 7, {n: i for i, n in enumerate(WEEKDAYS)}, "'*', '1-5' or 'MON-FRI'"),
}
MAX_DAYS = (31, 29, 31, 30, 31, 30, 31, 31, 30, 31, 30, 31)
# ASCII digits only: `str.isdigit()` and `int()` also take '⑤' or Arabic-Indic digits.
NUMBER = re.compile(r"[0-9]{1,9}")
LONGEST_EXPRESSION = 1000
"""Characters a cron expression may have: far more than any real one, and it bounds the work."""
EARLIEST_MS = -30_610_224_000_000
"""`Schedule.next_slot` looks from 1000-01-01T00:00Z at the earliest (slots themselves are
never before 1970: see `MAX_SLOT_MS` for the other end)."""


class EndOfTime(ConfigError):
    """No slot is left before the end of year 9999 (`MAX_SLOT_MS`)."""


def parse_field(expression: str, name: str, text: str) -> tuple[int, ...]:
    low, high, names, example = FIELDS[name]

    def fail(problem: str) -> ConfigError:
        return ConfigError(
            f"cron expression {expression!r}: the {name} field {text!r} {problem}; "
            f"{name} values are {low}-{high}, for example {example}"
        )

    def number(word: str) -> int:
        if NUMBER.fullmatch(word):
            value: int | None = int(word)
        elif word.isascii() and word.isdigit():  # more than 9 digits
            raise fail(f"has {shown(word)}, which is out of range")
        else:
            value = names.get(word.upper())
        if value is None:
            ascii_only = "" if word.isascii() else " (write numbers with the ASCII digits 0-9)"
            raise fail(f"has {shown(word)}, which is not a number{ascii_only}")
        if not low <= value <= high:
            raise fail(f"has {value}, which is out of range")
        return value

    values: set[int] = set()
    for term in text.split(","):
        base, slash, step_text = term.partition("/")
        step = 1
        if slash:
            if step_text.isascii() and step_text.isdigit() and not NUMBER.fullmatch(step_text):
                raise fail(f"has step {shown(step_text)}, which is out of range")
            if not NUMBER.fullmatch(step_text) or int(step_text) == 0:
                raise fail(
                    f"has step {shown(step_text)}; a step is a whole number (ASCII digits) "
                    "of at least 1"
                )
            step = int(step_text)
        if base in ("*", "?"):
            first, last = low, high
        elif "-" in base:
            start, _, end = base.partition("-")
            first, last = number(start), number(end)
            if first > last:
                raise fail(f"has the range {base!r}, which runs backwards")
        else:
            first = number(base)
            last = high if slash else first
        values.update(range(first, last + 1, step))
    if name == "day-of-week" and 7 in values:
        values = (values - {7}) | {0}
    return tuple(sorted(values))


def zone_offset(zone: ZoneInfo, instant: int) -> int:
    """The zone's UTC offset in seconds at an instant (epoch seconds)."""
    delta = datetime.fromtimestamp(instant, zone).utcoffset()
    assert delta is not None
    return delta.days * DAY + delta.seconds


def first_change(zone: ZoneInfo, start: int, end: int, offset: int) -> int | None:
    """The first instant in (start, end] whose offset differs from ``offset``, if any.

    Probes once a day, then bisects: two transitions less than a day apart that cancel each
    other out would be missed (zoneinfo does not expose its transition table).
    """
    probe = start
    while probe < end:
        low, probe = probe, min(probe + DAY, end)
        if zone_offset(zone, probe) != offset:
            while probe - low > 1:
                middle = (low + probe) // 2
                if zone_offset(zone, middle) == offset:
                    low = middle
                else:
                    probe = middle
            return probe
    return None


def clock_text(wall: datetime) -> str:
    return f"{wall:%H:%M}" if wall.second == 0 else f"{wall:%H:%M:%S}"
