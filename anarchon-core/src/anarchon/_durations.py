"""Durations: integer milliseconds, `timedelta`, or strings such as ``"30s"``, ``"500ms"``, ``"2m"``."""

from __future__ import annotations

import re
from datetime import timedelta

from ._errors import ConfigError

__all__ = ["MAX_DURATION_MS", "DurationLike", "to_ms"]

DurationLike = int | timedelta | str
MAX_DURATION_MS = 366 * 24 * 3600 * 1000
"""No duration anarchon accepts is longer than a year; anything longer is a typo."""

_UNITS = {"ms": 1, "s": 1000, "m": 60_000, "h": 3_600_000, "d": 86_400_000}
_PART = re.compile(r"(\d+(?:\.\d+)?)(ms|s|m|h|d)")


def to_ms(value: object, *, what: str = "duration", allow_zero: bool = False) -> int:
    """Convert a duration to positive whole milliseconds, or raise `ConfigError`.

    Strings are one or more number-unit parts (``"1m30s"``); units are ms, s, m, h, d.
    """
    ms: float
    if isinstance(value, bool):
        raise ConfigError(f"{what} must be a duration, got a bool")
    if isinstance(value, int):
        ms = value
    elif isinstance(value, float):
        raise ConfigError(
            f"{what} must be whole milliseconds (int), a timedelta or a string like '30s'"
        )
    elif isinstance(value, timedelta):
        ms = value / timedelta(milliseconds=1)
    elif isinstance(value, str):
        text = value.strip().lower().replace(" ", "")
        if text.isdigit():
            ms = int(text)
        else:
            pos, ms = 0, 0.0
            for match in _PART.finditer(text):
                if match.start() != pos:
                    break
                ms += float(match.group(1)) * _UNITS[match.group(2)]
                pos = match.end()
            if pos != len(text) or not text:
                raise ConfigError(
                    f"{what} {value!r} is not a duration: write milliseconds as an int, or a string "
                    "like '500ms', '30s', '2m', '1h', '1m30s'"
                )
    else:
        raise ConfigError(
            f"{what} must be int milliseconds, a timedelta or a string like '30s', "
            f"got {type(value).__name__}"
        )
    if ms != int(ms):
        raise ConfigError(f"{what} {value!r} is not a whole number of milliseconds")
    result = int(ms)
    if result < 0 or (result == 0 and not allow_zero):
        wanted = "0 or more (0 turns it off)" if allow_zero else "positive"
        raise ConfigError(f"{what} must be {wanted}, got {value!r}")
    if result > MAX_DURATION_MS:
        raise ConfigError(f"{what} {value!r} is longer than a year; use a shorter duration")
    return result
