"""anarchon-prometheus: Prometheus metrics of what the cluster decided, from this instance's view.

Installed, it is found through the ``anarchon`` entry points; it is active once configured:

* in code: ``anarchon_prometheus.configure(port=9464)`` (or ``configure(registry)`` to use your own
  registry and ``/metrics``);
* or by environment: ``ANARCHON_PROMETHEUS_PORT=9464`` opens the port when a scheduler starts.

Metrics: ``anarchon_claims_total{job,outcome}``, ``anarchon_takeovers_total{job}``,
``anarchon_runs_fenced_total{job}``, ``anarchon_runs_finished_total{job,status}``,
``anarchon_store_errors_total{operation}``, ``anarchon_claim_latency_seconds{job}``,
``anarchon_run_duration_seconds{job,status}``, ``anarchon_running_jobs{job}``,
``anarchon_lease_age_seconds{job}``, and on stores with a member list
``anarchon_fleet_slots_total{role}`` and ``anarchon_fleet_wins_total{role}``.
"""

from __future__ import annotations

from ._config import ADDR_ENV, PORT_ENV, active, configure, configure_from_env, disable
from ._metrics import CLAIM_BUCKETS, RUN_BUCKETS, PrometheusMetrics

__all__ = [
    "ADDR_ENV",
    "CLAIM_BUCKETS",
    "PORT_ENV",
    "RUN_BUCKETS",
    "PrometheusMetrics",
    "active",
    "configure",
    "configure_from_env",
    "disable",
]
