"""Validation of names that end up in store keys, rows, queue names and NATS subjects."""

from __future__ import annotations

import re

from ._errors import ConfigError

__all__ = [
    "MAX_INSTANCE_LENGTH",
    "NAME_PATTERN",
    "check_instance",
    "check_name",
    "printable_host",
    "shown",
]

NAME_PATTERN = re.compile(r"[A-Za-z0-9][A-Za-z0-9_-]{0,99}")
"""Job names and prefixes: a letter or digit, then up to 99 letters, digits, `_` or `-`."""
MAX_INSTANCE_LENGTH = 300
"""Characters an instance id may have. The default id ``host:pid:xxxx`` fits with any host name
(at most 255 characters on every system), a pid of up to 20 digits and the 4 hex characters."""
_SHOWN = 60
"""Characters of a refused value an error message shows (the value may be megabytes long)."""


def shown(value: object) -> str:
    """`value`'s repr for an error message, cut after `_SHOWN` characters."""
    text = repr(value)
    return text if len(text) <= _SHOWN else f"{text[:_SHOWN]}... ({len(text)} characters)"


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
            f"{what} {shown(value)} {problem}: use 1 to 100 ASCII letters, digits, '_' or '-', "
            "starting with a letter or digit (names become store keys, queue names and subjects)"
        )
    return value


def check_instance(value: object, *, what: str = "instance") -> str:
    """Return `value` if it is a valid instance id, else raise `ConfigError` saying why.

    An instance id is free text shown in history and logs: 1 to `MAX_INSTANCE_LENGTH` printable
    characters (`str.isprintable`: letters, digits, punctuation, symbols and the ASCII space in
    any script). Control characters and line breaks (stores separate fields with them), other
    whitespace and invisible format characters, and lone surrogates (which no store can encode)
    are refused. Every host name is valid, so the default ``host:pid:xxxx`` is too.
    """
    if not isinstance(value, str):
        raise ConfigError(
            f"{what} must be a string such as 'web-1' or 'host:pid', got {type(value).__name__}"
        )
    if not value:
        problem = "is empty"
    elif len(value) > MAX_INSTANCE_LENGTH:
        problem = f"is {len(value)} characters long (at most {MAX_INSTANCE_LENGTH})"
    elif not value.isprintable():
        bad = next(c for c in value if not c.isprintable())
        problem = f"contains {bad!r}, which is not printable"
    else:
        return value
    raise ConfigError(
        f"{what} {shown(value)} {problem}: use 1 to {MAX_INSTANCE_LENGTH} printable characters "
        "(no control characters, line breaks or lone surrogates), like 'web-1' or 'host:pid'"
    )


def printable_host(name: str) -> str:
    """A host name as the first part of an instance id (``host:pid:xxxx``), always valid there:
    characters `check_instance` refuses (a byte of a host name that is not UTF-8 comes back from
    `socket.gethostname` as a lone surrogate) become ``?``, and it is cut to 255 characters,
    the longest host name any system allows."""
    return "".join(c if c.isprintable() else "?" for c in name[:255])
