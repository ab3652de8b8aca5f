"""Retries after a failure (rule L12): the values shared by the runtime and the stores.

A run whose function raises can be tried again as attempt n + 1 on any instance. The failed try
is kept in the run's **try log** (`RunRecord.error`), one entry per try joined by
`TRY_SEPARATOR`, so the ledger shows every try of a slot in its one record. Stores append the
entries they are given (newest last) and keep at most `MAX_TRY_LOG_CHARS` characters, dropping
the oldest text first; they never parse the log."""

from __future__ import annotations

import re
from datetime import timedelta

import attrs

from ._durations import MAX_LEASE_MS, to_ms
from ._errors import ConfigError
from ._names import shown

__all__ = [
    "MAX_RETRIES",
    "MAX_TRY_LOG_CHARS",
    "TRY_SEPARATOR",
    "Backoff",
    "append_try",
    "check_retries",
    "retried",
    "try_entry",
]

MAX_RETRIES = 100
"""Most retries a job may ask for (`retries=`)."""

MAX_TRY_LOG_CHARS = 4000
"""Longest try log a store keeps (the oldest text is dropped first)."""

TRY_SEPARATOR = " | "
"""Between two entries of a try log."""


def try_entry(attempt: int, error: str) -> str:
    """The try log's entry for `attempt` that failed with `error`: ``attempt 2 failed: ...``."""
    return f"attempt {attempt} failed: {error}"


_TRY_MARK = re.compile(r"(?:^|\| )attempt \d+ failed: ")


def retried(error: str | None) -> bool:
    """Whether a run's error holds a try log (L12) of failed tries, for what the dashboard and
    the status show; the stores never read it."""
    return error is not None and _TRY_MARK.search(error) is not None


def append_try(log: str | None, entry: str | None) -> str | None:
    """L12: `log` with `entry` appended (None: nothing to add), at most `MAX_TRY_LOG_CHARS`
    characters, the oldest dropped first. The stores' own code (SQL, Lua) does the same."""
    if entry is None:
        return log
    joined = entry if not log else f"{log}{TRY_SEPARATOR}{entry}"
    return joined[-MAX_TRY_LOG_CHARS:]


def check_retries(value: object, *, where: str) -> int:
    """`retries=`: an int from 0 to `MAX_RETRIES`, else `ConfigError` naming `where`."""
    if isinstance(value, bool) or not isinstance(value, int) or not 0 <= value <= MAX_RETRIES:
        raise ConfigError(
            f"{where}: retries must be an int from 0 to {MAX_RETRIES}, got {shown(value)}"
        )
    return value


@attrs.frozen(kw_only=True)
class Backoff:
    """How long a failed run waits before its next try: `first_ms` after the first failure,
    then times `factor` per further failure, at most `max_ms`."""

    first_ms: int = 10_000
    factor: float = 2.0
    max_ms: int = 600_000

    def delay_ms(self, failures: int) -> int:
        """The wait after the `failures`-th failure of a run (1 for the first)."""
        if failures < 1:
            raise ValueError(f"failures must be >= 1, got {failures}")
        delay = self.first_ms * self.factor ** (failures - 1)
        return int(min(delay, self.max_ms))

    @classmethod
    def parse(cls, value: object, *, where: str) -> Backoff:
        """A `Backoff`, a duration (``"30s"``, a timedelta, ms as an int: a fixed wait), or a
        mapping with ``first``, ``factor`` and ``max`` (each wait at most a day); else
        `ConfigError` naming `where`."""
        if isinstance(value, Backoff):
            return value
        if isinstance(value, (str, int, timedelta)) and not isinstance(value, bool):
            ms = to_ms(value, what=f"{where}: backoff", most=MAX_LEASE_MS)
            return cls(first_ms=ms, factor=1.0, max_ms=ms)
        if isinstance(value, dict):
            unknown = set(value) - {"first", "factor", "max"}
            if unknown:
                raise ConfigError(
                    f"{where}: backoff takes 'first', 'factor' and 'max', got {sorted(unknown)}"
                )
            first = to_ms(
                value.get("first", 10_000), what=f"{where}: backoff first", most=MAX_LEASE_MS
            )
            most = to_ms(value.get("max", 600_000), what=f"{where}: backoff max", most=MAX_LEASE_MS)
            factor = value.get("factor", 2.0)
            if (
                isinstance(factor, bool)
                or not isinstance(factor, (int, float))
                or not 1.0 <= factor <= 100.0
            ):
                raise ConfigError(
                    f"{where}: backoff factor must be a number from 1 to 100, got {shown(factor)}"
                )
            if most < first:
                raise ConfigError(f"{where}: backoff max ({most} ms) is below first ({first} ms)")
            return cls(first_ms=first, factor=float(factor), max_ms=most)
        raise ConfigError(
            f"{where}: backoff must be a duration like '30s' or a mapping with 'first', "
            f"'factor' and 'max', got {shown(value)}"
        )
