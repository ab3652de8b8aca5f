"""Turning OpenTelemetry on: `configure()` in code, or ``ANARCHON_OTEL_ENABLED`` at start."""

from __future__ import annotations

import os
import threading
from collections.abc import Mapping

from opentelemetry.metrics import MeterProvider
from opentelemetry.trace import TracerProvider

from ._observer import OtelObserver

__all__ = ["ENABLED_ENV", "active", "configure", "configure_from_env", "disable"]

ENABLED_ENV = "ANARCHON_OTEL_ENABLED"
"""``1``/``true``/``yes``: record with the global providers when a scheduler starts."""

_lock = threading.Lock()
_active: OtelObserver | None = None


def active() -> OtelObserver | None:
    """The configured observer, or None: installed but not configured means inactive."""
    return _active


def configure(
    *, tracer_provider: TracerProvider | None = None, meter_provider: MeterProvider | None = None
) -> OtelObserver:
    """Turn spans and metrics on, with these providers (default: the global ones). Calling it
    again replaces the observer."""
    global _active
    with _lock:
        _active = OtelObserver(tracer_provider=tracer_provider, meter_provider=meter_provider)
        return _active


def configure_from_env(environ: Mapping[str, str] | None = None) -> OtelObserver | None:
    """`configure()` when ``ANARCHON_OTEL_ENABLED`` is true and nothing was configured in code."""
    env = os.environ if environ is None else environ
    if _active is None and env.get(ENABLED_ENV, "").strip().lower() in ("1", "true", "yes", "on"):
        return configure()
    return _active


def disable() -> None:
    """Turn it off (tests, reconfiguration); spans of runs in flight are not ended."""
    global _active
    with _lock:
        _active = None
