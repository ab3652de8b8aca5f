"""Options of `nats://` and `tls://`: the strategy, the stream and what it remembers."""

from __future__ import annotations

import re
from typing import Any

import attrs

from anarchon import ConfigError, DurationMs, StoreOptions

__all__ = [
    "DEFAULT_DUPLICATE_WINDOW_MS",
    "DEFAULT_MAX_AGE_MS",
    "STRATEGIES",
    "NATSOptions",
]

STRATEGIES = ("msg-id", "expected-seq")
"""The ``strategy`` values (one class each in `_strategies`)."""
STORAGES = ("file", "memory")
DEFAULT_DUPLICATE_WINDOW_MS = 600_000
"""msg-id: how long the stream remembers a ``job:slot`` message id (ten minutes)."""
DEFAULT_MAX_AGE_MS = 86_400_000
"""How long the stream keeps a claim message (one day): the history, and the memory of
expected-seq."""
MIN_WINDOW_MS = 100
MAX_AGE_LIMIT_MS = 366 * 86_400_000
_STREAM_NAME = re.compile(r"[A-Za-z0-9_-]{1,64}")


def _one_of(choices: tuple[str, ...], hint: str) -> Any:
    def check(_: object, attribute: attrs.Attribute[str], value: object) -> None:
        if value not in choices:
            raise ConfigError(
                f"{attribute.name} must be one of {', '.join(choices)}, got {value!r} ({hint})"
            )

    return check


def _bounded(low: int, high: int, unit: str) -> Any:
    def check(_: object, attribute: attrs.Attribute[int], value: object) -> None:
        if isinstance(value, bool) or not isinstance(value, int) or not low <= value <= high:
            raise ConfigError(f"{attribute.name} must be from {low} to {high}{unit}, got {value!r}")

    return check


def _check_stream(_: object, attribute: attrs.Attribute[str | None], value: object) -> None:
    if value is None:
        return
    if not isinstance(value, str) or not _STREAM_NAME.fullmatch(value):
        raise ConfigError(
            f"stream {value!r} is not a valid stream name: use 1 to 64 ASCII letters, digits, "
            "'_' or '-' (or leave it out: ANARCHON_<prefix>)"
        )


def _check_file(_: object, attribute: attrs.Attribute[str | None], value: object) -> None:
    if value is not None and (not isinstance(value, str) or not value):
        raise ConfigError(f"{attribute.name} must be a file path, got {value!r}")


@attrs.frozen(kw_only=True)
class NATSOptions(StoreOptions):
    """Options of the NATS JetStream store (URL query parameters or keyword arguments).

    ``history_limit`` and ``retention_margin_ms`` are accepted and not used: the stream keeps
    claims for `max_age_ms`, and anarchon never deletes messages (that would forget claims).
    """

    strategy: str = attrs.field(
        default="msg-id",
        validator=_one_of(STRATEGIES, "msg-id is the default: de-duplication by message id"),
    )
    """``msg-id``: publish to ``<prefix>.<job>.claims`` with ``Nats-Msg-Id: <job>:<slot>``; the
    stream remembers a run for `duplicate_window_ms`. ``expected-seq``: publish to
    ``<prefix>.<job>.slot.<slot>`` with ``Nats-Expected-Last-Subject-Sequence: 0``; the stream
    remembers a run as long as it keeps the message (`max_age_ms`)."""
    stream: str | None = attrs.field(default=None, validator=_check_stream)
    """The stream's name; default ``ANARCHON_<prefix>``."""
    duplicate_window_ms: DurationMs = attrs.field(
        default=DurationMs(DEFAULT_DUPLICATE_WINDOW_MS),
        validator=_bounded(MIN_WINDOW_MS, MAX_AGE_LIMIT_MS, " ms"),
    )
    """msg-id: the stream's duplicate window, how long a run is remembered (T3)."""
    max_age_ms: DurationMs = attrs.field(
        default=DurationMs(DEFAULT_MAX_AGE_MS),
        validator=_bounded(MIN_WINDOW_MS, MAX_AGE_LIMIT_MS, " ms"),
    )
    """The stream's ``max_age``: how long a claim message is kept (history; expected-seq's memory)."""
    replicas: int = attrs.field(default=1, validator=_bounded(1, 5, ""))
    """The stream's replicas (3 on a cluster survives the loss of a server)."""
    storage: str = attrs.field(
        default="file",
        validator=_one_of(STORAGES, "memory storage forgets every claim when the server restarts"),
    )
    """``file`` (default) or ``memory`` (forgets every claim when the server restarts)."""
    timeout_ms: DurationMs = attrs.field(
        default=DurationMs(5_000), validator=_bounded(10, 600_000, " ms")
    )
    """Longest a connection attempt or a request may take before `StoreUnavailable`."""
    tls_ca_file: str | None = attrs.field(default=None, validator=_check_file)
    """CA bundle to verify the server (``tls://``); default: the system's CAs."""
    tls_cert_file: str | None = attrs.field(default=None, validator=_check_file)
    """Client certificate (mutual TLS), with `tls_key_file`."""
    tls_key_file: str | None = attrs.field(default=None, validator=_check_file)
    """Client key (mutual TLS), with `tls_cert_file`."""

    def __attrs_post_init__(self) -> None:
        if self.strategy == "msg-id" and self.duplicate_window_ms > self.max_age_ms:
            raise ConfigError(
                f"duplicate_window_ms ({self.duplicate_window_ms} ms) must not exceed max_age_ms "
                f"({self.max_age_ms} ms): the stream would drop a claim it must still remember. "
                f"Raise max_age_ms to at least {self.duplicate_window_ms} ms"
            )
        if (self.tls_cert_file is None) != (self.tls_key_file is None):
            raise ConfigError("tls_cert_file and tls_key_file go together: give both or neither")

    @property
    def stream_name(self) -> str:
        return self.stream or f"ANARCHON_{self.prefix}"
