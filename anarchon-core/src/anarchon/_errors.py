"""The exceptions anarchon raises. Every message says what was wrong and how to fix it."""

from __future__ import annotations

__all__ = [
    "AnarchonError",
    "ConfigError",
    "Fenced",
    "StoreCorrupt",
    "StoreUnavailable",
]


class AnarchonError(Exception):
    """Base class of every error anarchon raises on purpose."""


class ConfigError(AnarchonError, ValueError):
    """Invalid configuration: a cron expression, name, URL, option or duration.

    Raised before anything is written, so a bad setting loses nothing.
    """


class StoreUnavailable(AnarchonError, ConnectionError):
    """The store could not be reached, or the connection broke during a call.

    A claim that fails this way may be resent with the same token (rule C2).
    """


class StoreCorrupt(AnarchonError):
    """The store holds data anarchon did not write, or that it cannot read.

    The message names the key, row or table. anarchon never overwrites such data.
    """


class Fenced(AnarchonError):
    """The run's lease is no longer held by this instance (rule F1).

    Raised by `Run.ensure_held()` once the runner fenced itself or the store refused a renew.
    """
