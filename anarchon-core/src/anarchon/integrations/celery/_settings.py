"""The beat scheduler's settings, read from the Celery app's configuration (``app.conf``)."""

from __future__ import annotations

import math
import re
from collections.abc import Mapping
from datetime import timedelta
from fractions import Fraction
from typing import Any

import attrs

from ..._capabilities import Capabilities
from ..._durations import MAX_LATE_MS, to_ms
from ..._errors import ConfigError
from ..._names import check_instance, check_name, shown
from ..._runtime.settings import default_instance_id
from ..._urls import shown_url

__all__ = ["DEFAULT_MAX_LATE_MS", "LEASE_MS", "BeatSettings", "read_settings"]

DEFAULT_MAX_LATE_MS = 60_000
LEASE_MS = 30_000
"""The lease of a run on lease stores. The run is only the send, finished as soon as
``apply_async`` returns, so the lease matters only for a node that dies between its win and
its send."""
_SECONDS = re.compile(r"[0-9]+(?:\.[0-9]+)?")
CLOCK_SKEW_MS = 1_000
"""Clock skew the memory rule (T3) allows for between beat nodes and the store."""


@attrs.frozen(kw_only=True)
class BeatSettings:
    """What the ``anarchon_*`` settings of a Celery app say."""

    store: str = attrs.field(repr=lambda url: repr(shown_url(url)))
    """The store URL (``anarchon_store``); its repr hides the credentials."""
    instance: str
    """This beat node's id in history and logs (``anarchon_instance``)."""
    prefix: str | None
    """The deployment's namespace in the store (``anarchon_prefix``); None: the store's own."""
    max_late_ms: int
    """How late a slot may still be sent (``anarchon_max_late``)."""

    def check_memory(self, caps: Capabilities, store_name: str) -> None:
        """T3: the store must remember a run for ``max_late`` plus clock skew (plus the lease
        on lease stores); else a node could send a slot the store forgot, a second time."""
        if caps.remembers_ms is None:
            return
        horizon = LEASE_MS if caps.leases else 0
        needed = self.max_late_ms + CLOCK_SKEW_MS + horizon
        if needed > caps.remembers_ms:
            safe = max(caps.remembers_ms - CLOCK_SKEW_MS - horizon, 0)
            raise ConfigError(
                f"anarchon_max_late ({self.max_late_ms / 1000:g} s) plus {CLOCK_SKEW_MS} ms of "
                f"clock skew is longer than {store_name} remembers a claim "
                f"({caps.remembers_ms} ms), so a late beat node could send a slot a second time "
                f"(rule T3). Set anarchon_max_late to at most {safe / 1000:g} s, or make the "
                f"store remember at least {needed} ms"
            )


def _max_late(value: Any) -> int:
    what = "anarchon_max_late"
    if isinstance(value, bool):
        raise ConfigError(
            f"{what} must be a number of seconds, a timedelta or '30s', got {value!r}"
        )
    if isinstance(value, (int, float)):
        # Celery counts durations in seconds (schedules, beat_cron_starting_deadline).
        if not math.isfinite(value):
            raise ConfigError(f"{what} must be a finite number of seconds, got {value!r}")
        value = round(Fraction(value) * 1000)
    elif isinstance(value, timedelta):
        value = value // timedelta(milliseconds=1)
    elif isinstance(value, str) and _SECONDS.fullmatch(value.strip()):
        value = round(Fraction(value.strip()) * 1000)  # "90" from an environment variable
    elif not isinstance(value, str):
        raise ConfigError(
            f"{what} must be a number of seconds, a timedelta or a string like '2m', "
            f"got {shown(value)}"
        )
    return to_ms(value, what=what, most=MAX_LATE_MS)


def read_settings(conf: Mapping[str, Any]) -> BeatSettings:
    """The settings from a Celery app's ``conf``; `ConfigError` names the bad one and the fix."""
    store = conf.get("anarchon_store")
    if store is None or store == "":
        raise ConfigError(
            "anarchon_store is not set: set it in the Celery configuration to a store every beat "
            "node reaches, e.g. app.conf.anarchon_store = 'redis://redis-host:6379/0' or "
            "'postgresql://user@db-host/app'"
        )
    if not isinstance(store, str):
        raise ConfigError(f"anarchon_store must be a URL string, got {type(store).__name__}")
    instance = conf.get("anarchon_instance")
    prefix = conf.get("anarchon_prefix")
    max_late = conf.get("anarchon_max_late")
    return BeatSettings(
        store=store,
        instance=(
            default_instance_id()
            if instance is None
            else check_instance(instance, what="anarchon_instance")
        ),
        prefix=None if prefix is None else check_name(prefix, what="anarchon_prefix"),
        max_late_ms=DEFAULT_MAX_LATE_MS if max_late is None else _max_late(max_late),
    )
