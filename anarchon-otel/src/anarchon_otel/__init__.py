"""anarchon-otel: OpenTelemetry spans and metrics of what the cluster decided.

Installed, it is found through the ``anarchon`` entry points; it is active once configured:

* in code: ``anarchon_otel.configure()`` (global providers) or
  ``configure(tracer_provider=..., meter_provider=...)``;
* or by environment: ``ANARCHON_OTEL_ENABLED=1`` turns it on when a scheduler starts.

Spans ``anarchon.claim`` and ``anarchon.run``; metrics ``anarchon.claims``, ``anarchon.takeovers``,
``anarchon.runs.fenced``, ``anarchon.runs.finished``, ``anarchon.store.errors``,
``anarchon.claim.duration``, ``anarchon.run.duration``, ``anarchon.runs.active``,
``anarchon.lease.age``.
"""

from __future__ import annotations

from ._config import ENABLED_ENV, active, configure, configure_from_env, disable
from ._observer import OtelObserver

__all__ = ["ENABLED_ENV", "OtelObserver", "active", "configure", "configure_from_env", "disable"]
