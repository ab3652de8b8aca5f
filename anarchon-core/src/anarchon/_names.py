"""Validation of names that end up in store keys, rows, queue names and NATS subjects."""

from __future__ import annotations

import re

from ._errors import ConfigError

__all__ = ["NAME_PATTERN", "check_name"]

NAME_PATTERN = re.compile(r"[A-Za-z0-9][A-Za-z0-9_-]{0,99}")
"""Job names and prefixes: a letter or digit, then up to 99 letters, digits, `_` or `-`."""


def check_name(value: object, *, what: str = "job name") -> str:
    """Return `value` if it is a valid name, else raise `ConfigError` saying why."""
    if not isinstance(value, str):
        raise ConfigError(f"{what} must be a string, got {type(value).__name__}")
    if NAME_PATTERN.fullmatch(value) is None:
        if not value:
            problem = "is empty"
        elif len(value) > 100:
            problem = f"is {len(value)} characters long (at most 100)"
        elif not value[0].isascii() or not value[0].isalnum():
            problem = f"starts with {value[0]!r} (must start with a letter or digit)"
        else:
            bad = next(c for c in value if not (c.isascii() and (c.isalnum() or c in "_-")))
            problem = f"contains {bad!r}"
        raise ConfigError(
            f"{what} {value!r} {problem}: use 1 to 100 ASCII letters, digits, '_' or '-', "
            "starting with a letter or digit (names become store keys, queue names and subjects)"
        )
    return value
