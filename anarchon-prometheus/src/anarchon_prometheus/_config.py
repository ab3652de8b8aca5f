"""Turning the metrics on: `configure()` in code, or ``ANARCHON_PROMETHEUS_PORT`` at start."""

from __future__ import annotations

import logging
import os
import threading
from collections.abc import Mapping

from prometheus_client import CollectorRegistry, start_http_server

from anarchon import ConfigError

from ._metrics import PrometheusMetrics

__all__ = ["ADDR_ENV", "PORT_ENV", "active", "configure", "configure_from_env", "disable"]

log = logging.getLogger("anarchon.prometheus")

PORT_ENV = "ANARCHON_PROMETHEUS_PORT"
"""Serve ``/metrics`` on this port when a scheduler starts (unless `configure()` ran first)."""
ADDR_ENV = "ANARCHON_PROMETHEUS_ADDR"
"""The address the port listens on (default ``0.0.0.0``)."""

_lock = threading.Lock()
_active: PrometheusMetrics | None = None


def active() -> PrometheusMetrics | None:
    """The configured metrics, or None: installed but not configured means inactive."""
    return _active


def configure(
    registry: CollectorRegistry | None = None, *, port: int | None = None, addr: str = "0.0.0.0"
) -> PrometheusMetrics:
    """Turn the metrics on: register them in `registry` (default: the global
    `prometheus_client.REGISTRY`, which your own ``/metrics`` may already serve) and, with `port`,
    serve ``http://addr:port/metrics`` from a daemon thread. Calling it again with the same
    registry returns the same metrics (and starts the port if it was not started)."""
    global _active
    with _lock:
        metrics = _active
        target = registry
        if metrics is not None and (target is None or metrics.registry is target):
            pass
        else:
            if metrics is not None:
                metrics.unregister()
            metrics = PrometheusMetrics(target)
            _active = metrics
        if port is not None and metrics.server is None:
            server, _ = start_http_server(port, addr, registry=metrics.registry)
            metrics.server = server
            metrics.port = int(server.server_port)
            log.info(
                "Prometheus metrics on http://%s:%d/metrics",
                addr,
                metrics.port,
                extra={"port": metrics.port},
            )
        return metrics


def configure_from_env(environ: Mapping[str, str] | None = None) -> PrometheusMetrics | None:
    """`configure(port=...)` from ``ANARCHON_PROMETHEUS_PORT`` when it is set and nothing was
    configured in code; None otherwise."""
    env = os.environ if environ is None else environ
    text = env.get(PORT_ENV, "").strip()
    if not text or _active is not None:
        return _active
    try:
        port = int(text)
    except ValueError:
        port = -1
    if not 0 <= port <= 65535:
        raise ConfigError(f"{PORT_ENV} must be a port number 0-65535, got {text!r}")
    return configure(port=port, addr=env.get(ADDR_ENV, "0.0.0.0") or "0.0.0.0")


def disable() -> None:
    """Turn the metrics off: unregister them and stop the port (tests, reconfiguration)."""
    global _active
    with _lock:
        if _active is not None:
            _active.unregister()
            _active = None
