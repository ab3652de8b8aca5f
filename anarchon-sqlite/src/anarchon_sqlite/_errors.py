"""Turn `sqlite3` exceptions into anarchon's errors, naming the file and the fix (DESIGN 11)."""

from __future__ import annotations

import sqlite3

from anarchon import AnarchonError, ConfigError, StoreCorrupt, StoreUnavailable

__all__ = ["is_busy", "translate"]

_BUSY = ("SQLITE_BUSY", "SQLITE_LOCKED")
_SETUP = ("SQLITE_CANTOPEN", "SQLITE_READONLY", "SQLITE_PERM", "SQLITE_AUTH")
_CORRUPT = ("SQLITE_NOTADB", "SQLITE_CORRUPT", "SQLITE_ERROR", "SQLITE_MISMATCH")


def _code(exc: sqlite3.Error) -> str:
    name = getattr(exc, "sqlite_errorname", None)
    if isinstance(name, str):
        return name
    text = str(exc).lower()  # Python 3.10 has no error names; match SQLite's fixed messages
    if "locked" in text or "busy" in text:
        return "SQLITE_BUSY"
    if "unable to open" in text or "readonly" in text:
        return "SQLITE_CANTOPEN"
    if "not a database" in text or "malformed" in text or "no such" in text:
        return "SQLITE_CORRUPT"
    return "SQLITE_IOERR"


def is_busy(exc: sqlite3.Error) -> bool:
    """The file is locked by another connection: worth retrying."""
    return _code(exc).startswith(_BUSY)


def translate(exc: sqlite3.Error, path: str, *, busy_timeout_ms: int) -> AnarchonError:
    """The anarchon error for `exc`, raised by an operation on the database file `path`."""
    code = _code(exc)
    if code.startswith(_BUSY):
        return StoreUnavailable(
            f"SQLite database {path} stayed locked by another connection for busy_timeout_ms="
            f"{busy_timeout_ms} ({exc}); the claim may be resent with the same token, or raise "
            "busy_timeout_ms if writers hold the file this long"
        )
    if code.startswith(_SETUP):
        return ConfigError(
            f"cannot open or write SQLite database {path} ({exc}): the directory must exist and be "
            "writable by this process, and the path must name a file; anarchon creates the file"
        )
    if code.startswith(_CORRUPT):
        return StoreCorrupt(
            f"SQLite database {path} cannot be used ({exc}): it is not a SQLite database, or its "
            "anarchon tables were changed by something else; point the URL at a new file"
        )
    return StoreUnavailable(f"SQLite database {path} failed ({exc})")
