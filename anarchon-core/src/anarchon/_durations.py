"""Durations: integer milliseconds, `timedelta`, or strings such as ``"30s"``, ``"500ms"``, ``"2m"``."""

from __future__ import annotations

import re
from datetime import timedelta
from fractions import Fraction

from ._errors import ConfigError
from ._names import shown

__all__ = ["MAX_DURATION_MS", "MAX_LATE_MS", "MAX_LEASE_MS", "DurationLike", "to_ms"]

DurationLike = int | timedelta | str
MAX_DURATION_MS = 366 * 24 * 3600 * 1000
"""No duration anarchon accepts is longer than a year; anything longer is a typo."""
MAX_LEASE_MS = 24 * 3600 * 1000
"""A job's lease is at most a day. The lease is how long a crashed winner keeps its job blocked
before another instance takes over (L4); the runner renews it every heartbeat (lease / 3 by
default), so a long job needs no long lease, and a longer one only delays the takeover. The
claim refuses longer leases too (`ClaimRequest.lease_ms`), so no run can block its job for ever."""
MAX_LATE_MS = 31 * 24 * 3600 * 1000
"""A job's ``max_late`` is at most 31 days: a monthly job may still start until its next slot.
A longer window would make every start (and every return from an outage) walk through more
missed slots (T6) than any deployment wants, and the store must remember runs that long (T3)."""

_UNITS = {"ms": 1, "s": 1000, "m": 60_000, "h": 3_600_000, "d": 86_400_000}
# ASCII digits only: `\d`, `str.isdigit()` and `int()` also take '⑤' or Arabic-Indic digits.
_DIGITS = re.compile(r"[0-9]+")
_PART = re.compile(r"([0-9]+)(?:\.([0-9]+))?(ms|s|m|h|d)")
_LONGEST_TEXT = 100
"""Characters a duration string may have: enough for any real one, and it bounds the arithmetic."""
_HINT = "write milliseconds as an int, or a string like '500ms', '30s', '2m', '1h', '1m30s'"


def _span(ms: int) -> str:
    if ms == MAX_DURATION_MS:
        return "a year"
    for unit, size in (("day", 86_400_000), ("hour", 3_600_000), ("second", 1000)):
        if ms % size == 0:
            count = ms // size
            return f"{count} {unit}{'s' if count != 1 else ''}"
    return f"{ms} ms"


def _parse(value: str, what: str) -> Fraction:
    text = value.strip().lower().replace(" ", "")
    if len(text) > _LONGEST_TEXT:
        raise ConfigError(f"{what} {shown(value)} is not a duration (too long): {_HINT}")
    if _DIGITS.fullmatch(text):
        return Fraction(int(text))
    pos, total = 0, Fraction(0)
    for match in _PART.finditer(text):
        if match.start() != pos:
            break
        whole, fraction, unit = match.groups()
        number = Fraction(int(whole))
        if fraction:
            number += Fraction(int(fraction), 10 ** len(fraction))
        total += number * _UNITS[unit]
        pos = match.end()
    if pos != len(text) or not text:
        raise ConfigError(f"{what} {shown(value)} is not a duration: {_HINT}")
    return total


def to_ms(
    value: object,
    *,
    what: str = "duration",
    allow_zero: bool = False,
    most: int = MAX_DURATION_MS,
) -> int:
    """Convert a duration to positive whole milliseconds, or raise `ConfigError`.

    Strings are one or more number-unit parts (``"1m30s"``); units are ms, s, m, h, d; numbers
    are ASCII digits, with an optional decimal part (``"1.5s"``). The result is at most `most`
    milliseconds (a year unless the caller says otherwise).
    """
    ms: Fraction
    if isinstance(value, bool):
        raise ConfigError(f"{what} must be a duration, got a bool")
    if isinstance(value, int):
        ms = Fraction(int(value))
    elif isinstance(value, float):
        raise ConfigError(
            f"{what} must be whole milliseconds (int), a timedelta or a string like '30s'"
        )
    elif isinstance(value, timedelta):
        micros = (value.days * 86_400 + value.seconds) * 1_000_000 + value.microseconds
        ms = Fraction(micros, 1000)
    elif isinstance(value, str):
        ms = _parse(value, what)
    else:
        raise ConfigError(
            f"{what} must be int milliseconds, a timedelta or a string like '30s', "
            f"got {type(value).__name__}"
        )
    if ms.denominator != 1:
        raise ConfigError(f"{what} {shown(value)} is not a whole number of milliseconds")
    result = int(ms)
    if result < 0 or (result == 0 and not allow_zero):
        wanted = "0 or more (0 turns it off)" if allow_zero else "positive"
        raise ConfigError(f"{what} must be {wanted}, got {shown(value)}")
    if result > most:
        raise ConfigError(
            f"{what} {shown(value)} is longer than {_span(most)} ({most} ms), the most it may "
            "be; use a shorter duration"
        )
    return result
