"""Options of `sqlite:///path`: the common store options plus the busy timeout."""

from __future__ import annotations

import attrs

from anarchon import ConfigError, DurationMs, StoreOptions

__all__ = ["MAX_BUSY_TIMEOUT_MS", "SQLiteOptions"]

MAX_BUSY_TIMEOUT_MS = 600_000
"""A claim never waits longer than ten minutes for the write lock; longer is a typo."""


def _check_busy_timeout(_: object, attribute: attrs.Attribute[DurationMs], value: object) -> None:
    # `value` is typed object: direct construction skips the converter and may pass anything.
    if (
        isinstance(value, bool)
        or not isinstance(value, int)
        or not 1 <= value <= MAX_BUSY_TIMEOUT_MS
    ):
        raise ConfigError(
            f"busy_timeout_ms must be from 1 ms to {MAX_BUSY_TIMEOUT_MS} ms (10 minutes), "
            f"got {value!r}: write for example busy_timeout_ms=5000 or busy_timeout_ms=5s"
        )


@attrs.frozen(kw_only=True)
class SQLiteOptions(StoreOptions):
    """Options of the SQLite store (URL query parameters or keyword arguments of `connect`)."""

    busy_timeout_ms: DurationMs = attrs.field(
        default=DurationMs(5000), validator=_check_busy_timeout
    )
    """How long a write (a claim's ``BEGIN IMMEDIATE``, renew, finish, release) waits for another
    connection's write lock before it fails with `StoreUnavailable`."""
