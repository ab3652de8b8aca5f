"""Settings from code, TOML (``[tool.anarchon]`` in pyproject.toml, or anarchon.toml) and
``ANARCHON_*`` environment variables. Code wins over the environment, which wins over files."""

from __future__ import annotations

import os
import secrets
import socket
import sys
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import attrs

from .._durations import to_ms
from .._errors import ConfigError
from .._names import check_instance, check_name, printable_host
from .._urls import shown_url
from .catch_up import DEFAULT_CATCH_UP, CatchUp, parse_catch_up

if sys.version_info >= (3, 11):
    import tomllib
else:  # pragma: no cover
    import tomli as tomllib

__all__ = [
    "DEFAULT_CONTENDERS",
    "DEFAULT_FLEET_GRACE_MS",
    "DEFAULT_FLEET_REFRESH_MS",
    "DEFAULT_FLEET_WATCHERS",
    "DEFAULT_STORE",
    "Settings",
    "default_instance_id",
    "load_settings",
]

DEFAULT_STORE = "sqlite:///anarchon.db"
DEFAULT_CONTENDERS = 2
"""Two instances claim each (job, slot) at its slot: one may die at the slot and the other still
decides it at once. With one watcher and the rest silent, the store's load per run stays flat
as the fleet grows (docs/benchmarks.md, section 6); a fleet of up to three instances claims as
before the fleet existed."""
MAX_CONTENDERS = 1_000
DEFAULT_FLEET_GRACE_MS = 500
"""A slot's contenders decide it within a claim round trip (milliseconds) plus the small clock
differences between instances (T2); half a second covers both for batches of hundreds of jobs,
and is what a slot waits when its contenders died. A watcher that claims before a slow batch of
its contenders is answered costs one more claim, never a second winner."""
DEFAULT_FLEET_REFRESH_MS = 5_000
DEFAULT_FLEET_WATCHERS = 1
"""One watcher per (job, slot) claims a grace after the slot: the slot of a contender that died
at the slot is decided then, not when the dead one's ttl runs out, for one read per run."""
MIN_FLEET_REFRESH_MS = 100
MAX_FLEET_MS = 600_000
ENV_PREFIX = "ANARCHON_"


def default_instance_id() -> str:
    """``host:pid:xxxx``: readable in history, unique per process start."""
    return f"{printable_host(socket.gethostname())}:{os.getpid()}:{secrets.token_hex(2)}"


@attrs.frozen(kw_only=True)
class Settings:
    """Scheduler settings; every one can come from code, the environment or a file."""

    store: str = attrs.field(default=DEFAULT_STORE, repr=lambda url: repr(shown_url(url)))
    """The store URL; its repr hides the credentials."""
    instance: str | None = None
    """This process's id in history and logs (`check_instance`: printable text, at most 300
    characters); None: ``host:pid:xxxx``."""
    prefix: str | None = None
    grace_ms: int = 30_000
    """On shutdown, how long running jobs may finish before their leases are released."""
    clock_skew_ms: int = 1_000
    """Clock skew the memory rule (T3) allows for between instances and the store."""
    start_timeout_ms: int = 10_000
    """How long `start()` retries a store that does not answer before giving up."""
    claim_timeout_ms: int = 10_000
    """A store call that takes longer is treated as a transport error and resent (same token)."""
    health_port: int | None = None
    """Serve ``/healthz`` and ``/readyz`` on this port (all interfaces) while started."""
    catch_up: CatchUp = DEFAULT_CATCH_UP
    """The jobs' default catch-up policy (T6): ``latest``, ``all`` or ``none``."""
    fail_fast: bool = False
    """`start()` fails when the store does not answer within ``start_timeout``; by default it
    starts degraded (not ready) and connects in the background."""
    trigger_poll_ms: int = 2_000
    """How often the scheduler asks the store for triggered runs (X1, ``anarchon trigger``),
    on stores with `Capabilities.trigger`; 0: never (this instance runs no triggered run)."""
    contenders: int = DEFAULT_CONTENDERS
    """On stores with a member list (`Capabilities.membership`): how many instances claim each
    (job, slot) at its slot (DESIGN section 12); 0: every instance claims every slot."""
    fleet_watchers: int = DEFAULT_FLEET_WATCHERS
    """How many instances, after the contenders, claim each (job, slot) a grace after its slot
    (the claim reads first: a decided slot costs them a read); the rest claim it only if all
    contenders and watchers left the member list."""
    fleet_grace_ms: int = DEFAULT_FLEET_GRACE_MS
    """How long after a slot its watchers wait before they claim it (the claim reads first;
    at most half the job's max_late)."""
    fleet_refresh_ms: int = DEFAULT_FLEET_REFRESH_MS
    """How often the instance announces itself and reads the member list; it stays listed
    for three refreshes after its last heartbeat."""


_DURATIONS = {
    "grace": "grace_ms",
    "clock_skew": "clock_skew_ms",
    "start_timeout": "start_timeout_ms",
    "claim_timeout": "claim_timeout_ms",
}
_NAMES = (
    "store",
    "instance",
    "prefix",
    "health_port",
    "catch_up",
    "fail_fast",
    "trigger_poll",
    "contenders",
    "fleet_watchers",
    "fleet_grace",
    "fleet_refresh",
    *_DURATIONS,
)
MAX_TRIGGER_POLL_MS = 3_600_000
"""A trigger is claimed within one poll: an hour is already far from "now"."""


def _find_file(start: Path) -> tuple[Path, Mapping[str, Any]] | None:
    for folder in (start, *start.parents):
        for name in ("anarchon.toml", "pyproject.toml"):
            path = folder / name
            if not path.is_file():
                continue
            try:
                data = tomllib.loads(path.read_text(encoding="utf-8"))
            except (OSError, UnicodeDecodeError, tomllib.TOMLDecodeError) as exc:
                raise ConfigError(f"cannot read {path}: {exc}") from None
            if name == "anarchon.toml":
                return path, data
            section = data.get("tool", {}).get("anarchon")
            if section is not None:
                return path, section
    return None


def load_settings(
    code: Mapping[str, Any] | None = None,
    *,
    environ: Mapping[str, str] | None = None,
    cwd: Path | None = None,
) -> Settings:
    """Merge the three sources; an unknown key or bad value is a `ConfigError` naming its source."""
    merged: dict[str, tuple[Any, str]] = {}
    found = _find_file(cwd or Path.cwd())
    if found is not None:
        path, data = found
        if not isinstance(data, Mapping):
            raise ConfigError(f"{path}: [tool.anarchon] must be a table")
        for key, value in data.items():
            if key == "jobs":
                continue
            merged[key] = (value, str(path))
    env = os.environ if environ is None else environ
    for key in _NAMES:
        name = ENV_PREFIX + key.upper()
        if name in env:
            merged[key] = (env[name], f"environment variable {name}")
    for key, value in (code or {}).items():
        if value is not None:
            merged[key] = (value, "code")
    values: dict[str, Any] = {}
    for key, (value, source) in merged.items():
        if key not in _NAMES:
            raise ConfigError(
                f"unknown setting {key!r} in {source}; valid settings: {', '.join(sorted(_NAMES))}"
            )
        if key in _DURATIONS:
            values[_DURATIONS[key]] = to_ms(value, what=f"{key} (from {source})")
        elif key == "trigger_poll":
            values["trigger_poll_ms"] = to_ms(
                value,
                what=f"trigger_poll (from {source})",
                allow_zero=True,
                most=MAX_TRIGGER_POLL_MS,
            )
        elif key in ("fleet_grace", "fleet_refresh"):
            ms = to_ms(value, what=f"{key} (from {source})", most=MAX_FLEET_MS)
            if key == "fleet_refresh" and ms < MIN_FLEET_REFRESH_MS:
                raise ConfigError(
                    f"fleet_refresh (from {source}) must be at least {MIN_FLEET_REFRESH_MS} ms "
                    f"(every instance writes a heartbeat each refresh), got {value!r}"
                )
            values[f"{key}_ms"] = ms
        elif key in ("contenders", "fleet_watchers"):
            values[key] = _contenders(value, source, key)
        elif key == "health_port":
            values[key] = _port(value, source)
        elif key == "prefix":
            values[key] = check_name(value, what=f"prefix (from {source})")
        elif key == "catch_up":
            values[key] = parse_catch_up(value, where=f"catch_up (from {source})")
        elif key == "fail_fast":
            values[key] = _flag(value, key, source)
        elif key == "instance":
            values[key] = check_instance(value, what=f"instance (from {source})")
        else:
            if not isinstance(value, str) or not value:
                raise ConfigError(
                    f"{key} (from {source}) must be a non-empty string, got {value!r}"
                )
            values[key] = value
    return Settings(**values)


def _flag(value: Any, key: str, source: str) -> bool:
    if isinstance(value, bool):
        return value
    text = str(value).strip().lower() if isinstance(value, (str, int)) else ""
    if text in ("1", "true", "yes", "on"):
        return True
    if text in ("0", "false", "no", "off"):
        return False
    raise ConfigError(f"{key} (from {source}) must be true or false (1/0, yes/no), got {value!r}")


def _contenders(value: Any, source: str, key: str) -> int:
    text = str(value).strip().lower() if isinstance(value, (str, int)) else ""
    if isinstance(value, bool):
        text = ""
    if text == "off":
        return 0
    if text.isdigit() and int(text) <= MAX_CONTENDERS:
        return int(text)
    meaning = (
        "how many instances claim each slot; 0 or 'off': all of them"
        if key == "contenders"
        else "how many instances claim each slot a grace late; 0 or 'off': none"
    )
    raise ConfigError(
        f"{key} (from {source}) must be a whole number 0-{MAX_CONTENDERS} ({meaning}), got "
        f"{value!r}"
    )


def _port(value: Any, source: str) -> int:
    try:
        port = int(value) if isinstance(value, (int, str)) and not isinstance(value, bool) else -1
    except ValueError:
        port = -1
    if not 0 <= port <= 65535:
        raise ConfigError(f"health_port (from {source}) must be a port 0-65535, got {value!r}")
    return port
