"""Options of `redis://` and `rediss://`: the strategy and what each strategy needs."""

from __future__ import annotations

import os
from typing import Any

import attrs

from anarchon.backend import ConfigError, DurationMs, StoreOptions

__all__ = [
    "DEFAULT_DURATION_SEC",
    "DEFAULT_MAXSIZE",
    "DEFAULT_WINDOW_MS",
    "STRATEGIES",
    "RedisOptions",
]

STRATEGIES = ("lease", "stream-id", "idmp", "script")
DEFAULT_DURATION_SEC = 600
"""idmp: how long Redis remembers a (job, slot) idempotency key, unless `duration_sec` is given."""
DEFAULT_MAXSIZE = 1000
"""idmp: idempotency keys Redis keeps per job, unless `maxsize` is given."""
DEFAULT_WINDOW_MS = 600_000
"""script: how far back the claim script looks for a slot, unless `window_ms` is given."""
MAX_WINDOW_MS = 86_400_000
MAX_WAIT_REPLICAS = 100
MAX_WAIT_TIMEOUT_MS = 60_000
DEFAULT_WAIT_TIMEOUT_MS = 100
"""Durability: how long a write waits for its replicas, unless `wait_timeout` is given."""
DEFAULT_RESTART_CHECK_MS = 10_000


def _check_strategy(_: object, attribute: attrs.Attribute[str], value: str) -> None:
    if value not in STRATEGIES:
        raise ConfigError(
            f"strategy must be one of {', '.join(STRATEGIES)}, got {value!r} "
            "(lease is the default: leases, takeover and fencing)"
        )


def _bounded(name: str, low: int, high: int, unit: str = "") -> Any:
    def check(_: object, attribute: attrs.Attribute[int | None], value: object) -> None:
        if value is None:
            return
        if isinstance(value, bool) or not isinstance(value, int) or not low <= value <= high:
            raise ConfigError(f"{name} must be from {low} to {high}{unit}, got {value!r}")

    return check


def _check_file(_: object, attribute: attrs.Attribute[str | None], value: object) -> None:
    if value is None:
        return
    if not isinstance(value, str) or not value:
        raise ConfigError(f"{attribute.name} must be a file path, got {value!r}")
    if not os.path.isfile(value):
        raise ConfigError(
            f"{attribute.name} {value!r} is not a file: give the path of a PEM file this "
            "process can read"
        )


TLS_OPTIONS = ("tls_ca_file", "tls_cert_file", "tls_key_file")
"""Options that apply to ``rediss://`` only."""

_ONLY = {
    "duration_sec": ("idmp",),
    "maxsize": ("idmp",),
    "window_ms": ("script",),
    "maxlen": ("stream-id", "idmp"),
}


@attrs.frozen(kw_only=True)
class RedisOptions(StoreOptions):
    """Options of the Redis store (URL query parameters or keyword arguments of `connect`)."""

    strategy: str = attrs.field(default="lease", validator=_check_strategy)
    """How a claim is decided: ``lease`` (Lua script with leases and fencing), ``stream-id``
    (``XADD`` with the slot as entry ID), ``idmp`` (``XADD ... IDMP``, Redis 8.6+) or ``script``
    (a Lua scan of the stream's last `window_ms`)."""
    duration_sec: int | None = attrs.field(
        default=None,
        validator=_bounded("duration_sec", 1, 86_400, " s"),
    )
    """idmp: ``IDMP-DURATION``, seconds Redis remembers a claim (default 600)."""
    maxsize: int | None = attrs.field(
        default=None,
        validator=_bounded("maxsize", 1, 10_000),
    )
    """idmp: ``IDMP-MAXSIZE``, claims Redis remembers per job (default 1000)."""
    window_ms: DurationMs | None = attrs.field(
        default=None,
        validator=_bounded("window_ms", 1, MAX_WINDOW_MS, " ms (one day)"),
    )
    """script: how far back the claim looks for the slot, and how long it remembers a claim
    (default 10 minutes)."""
    maxlen: int | None = attrs.field(
        default=None,
        validator=_bounded("maxlen", 1, 10_000_000),
    )
    """stream-id and idmp: entries kept in each job's claim stream (exact trimming on every
    claim); default `history_limit`."""
    timeout_ms: DurationMs = attrs.field(
        default=DurationMs(5000),
        validator=_bounded("timeout_ms", 1, 600_000, " ms"),
    )
    """How long one command (or a connect) may take before it fails with `StoreUnavailable`."""
    wait_replicas: int | None = attrs.field(
        default=None,
        validator=_bounded("wait_replicas", 1, MAX_WAIT_REPLICAS),
    )
    """Durability: every write that decides a claim (and renew, finish, release) waits until
    this many replicas acknowledged it (``WAIT``, in the same round trip as the write). A claim
    they do not confirm within `wait_timeout` answers ``unknown`` (C3), never ``won``; renew,
    finish and release raise `StoreUnavailable` (the runtime resends them, C2)."""
    wait_timeout: DurationMs | None = attrs.field(
        default=None,
        validator=_bounded("wait_timeout", 1, MAX_WAIT_TIMEOUT_MS, " ms"),
    )
    """Durability: how long a write waits for `wait_replicas` (default 100 ms); must be
    shorter than `timeout_ms`."""
    wait_aof: bool = False
    """Durability (Redis 7.2+, Valkey 8): wait with ``WAITAOF 1 <wait_replicas>`` instead: the
    primary (and `wait_replicas` replicas, if given) wrote the claim to their append-only
    file and fsynced it. Needs ``appendonly yes`` on the primary."""
    require_persistence: bool = False
    """Refuse to open (`ConfigError`) a server whose restart would empty it (no RDB snapshots,
    no AOF), or whose persistence settings cannot be read; by default that is a warning."""
    restart_check_ms: DurationMs = attrs.field(
        default=DurationMs(DEFAULT_RESTART_CHECK_MS),
        validator=_bounded("restart_check_ms", 100, 3_600_000, " ms"),
    )
    """How often the store reads the server's run id (``INFO server``) to notice a restart; also
    after every connection failure. Never per claim."""
    tls_ca_file: str | None = attrs.field(default=None, validator=_check_file)
    """CA bundle to verify the server (``rediss://``); default: the system's CAs."""
    tls_cert_file: str | None = attrs.field(default=None, validator=_check_file)
    """Client certificate (mutual TLS), with `tls_key_file`."""
    tls_key_file: str | None = attrs.field(default=None, validator=_check_file)
    """Client key (mutual TLS), with `tls_cert_file`."""
    sentinel_username: str | None = None
    """``redis+sentinel://``: the user the sentinels ask for (their ``requirepass``/ACL), with
    `sentinel_password`; the URL's own user and password are the primary's."""
    sentinel_password: str | None = None
    """``redis+sentinel://``: the password the sentinels ask for, if any."""

    def __attrs_post_init__(self) -> None:
        for name, strategies in _ONLY.items():
            if getattr(self, name) is not None and self.strategy not in strategies:
                raise ConfigError(
                    f"option {name} applies only to strategy={' or strategy='.join(strategies)}, "
                    f"not strategy={self.strategy}: remove it or change the strategy"
                )
        if self.sentinel_username is not None and self.sentinel_password is None:
            raise ConfigError(
                "sentinel_username needs sentinel_password: give both (or only the password)"
            )
        if self.wait_timeout is not None and not (self.wait_replicas or self.wait_aof):
            raise ConfigError(
                "wait_timeout applies only with wait_replicas=<n> or wait_aof=true: add one "
                "(wait_replicas=1&wait_timeout=100ms) or remove wait_timeout"
            )
        if self.waits and self.confirm_timeout_ms >= self.timeout_ms:
            raise ConfigError(
                f"wait_timeout ({self.confirm_timeout_ms} ms) must be shorter than timeout_ms "
                f"({self.timeout_ms} ms), or the connection gives up before Redis answers: "
                "lower wait_timeout or raise timeout_ms"
            )
        if (self.tls_cert_file is None) != (self.tls_key_file is None):
            raise ConfigError("tls_cert_file and tls_key_file go together: give both or neither")

    @property
    def tls_given(self) -> tuple[str, ...]:
        """The TLS options that were given (they need ``rediss://``)."""
        return tuple(name for name in TLS_OPTIONS if getattr(self, name) is not None)

    @property
    def waits(self) -> bool:
        """Writes wait for replicas or for the AOF (`wait_replicas`, `wait_aof`)."""
        return bool(self.wait_replicas) or self.wait_aof

    @property
    def confirm_timeout_ms(self) -> int:
        return self.wait_timeout if self.wait_timeout is not None else DEFAULT_WAIT_TIMEOUT_MS

    @property
    def idmp_duration_sec(self) -> int:
        return self.duration_sec if self.duration_sec is not None else DEFAULT_DURATION_SEC

    @property
    def idmp_maxsize(self) -> int:
        return self.maxsize if self.maxsize is not None else DEFAULT_MAXSIZE

    @property
    def script_window_ms(self) -> int:
        return self.window_ms if self.window_ms is not None else DEFAULT_WINDOW_MS

    @property
    def stream_maxlen(self) -> int:
        return self.maxlen if self.maxlen is not None else self.history_limit
