"""The metrics, and the observer that keeps them from the runtime's event hooks."""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator
from typing import TYPE_CHECKING

from prometheus_client import REGISTRY, CollectorRegistry, Counter, Histogram
from prometheus_client.core import GaugeMetricFamily, Metric
from prometheus_client.registry import Collector

from anarchon import Claim, ClaimRequest, RunStatus, hookimpl

if TYPE_CHECKING:
    from wsgiref.simple_server import WSGIServer

__all__ = ["CLAIM_BUCKETS", "RUN_BUCKETS", "PrometheusMetrics"]

CLAIM_BUCKETS = (0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0)
"""Seconds: a claim is one round trip to the store, longer when it is resent (C2)."""
RUN_BUCKETS = (0.01, 0.1, 0.5, 1.0, 5.0, 15.0, 60.0, 300.0, 900.0, 1800.0, 3600.0, 7200.0)
"""Seconds: cron jobs run from milliseconds to hours."""


class _Runs(Collector):
    """``anarchon_running_jobs`` and ``anarchon_lease_age_seconds``, computed at scrape time from
    the runs this instance is executing (started, not yet finished)."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._started: dict[tuple[str, int, int], float] = {}

    def started(self, job: str, slot: int, attempt: int) -> None:
        with self._lock:
            self._started[(job, slot, attempt)] = time.monotonic()

    def finished(self, job: str, slot: int, attempt: int) -> None:
        with self._lock:
            self._started.pop((job, slot, attempt), None)

    def collect(self) -> Iterator[Metric]:
        now = time.monotonic()
        with self._lock:
            items = list(self._started.items())
        running: dict[str, int] = {}
        oldest: dict[str, float] = {}
        for (job, _, _), since in items:
            running[job] = running.get(job, 0) + 1
            oldest[job] = min(oldest.get(job, since), since)
        count = GaugeMetricFamily(
            "anarchon_running_jobs", "Runs this instance is executing, by job", labels=["job"]
        )
        age = GaugeMetricFamily(
            "anarchon_lease_age_seconds",
            "Seconds since this instance won the oldest run of the job it is still executing",
            labels=["job"],
        )
        for job in sorted(running):
            count.add_metric([job], running[job])
            age.add_metric([job], now - oldest[job])
        yield count
        yield age

    def describe(self) -> Iterator[Metric]:
        # Described without samples, so registering never calls `collect` early.
        yield GaugeMetricFamily("anarchon_running_jobs", "", labels=["job"])
        yield GaugeMetricFamily("anarchon_lease_age_seconds", "", labels=["job"])


class PrometheusMetrics:
    """An anarchon observer that keeps Prometheus metrics in `registry` (default: the global
    `prometheus_client.REGISTRY`). Register it with the plugin manager, or let
    `anarchon_prometheus.configure()` do it through the installed entry point."""

    def __init__(self, registry: CollectorRegistry | None = None) -> None:
        self.registry = REGISTRY if registry is None else registry
        self.server: WSGIServer | None = None
        self.port: int | None = None
        r = self.registry
        self.claims = Counter(
            "anarchon_claims", "Claims decided, by job and outcome", ["job", "outcome"], registry=r
        )
        self.skips = Counter(
            "anarchon_skips",
            "Slots this instance decided not to run and recorded so (the ledger), by job and kind: "
            "overlap, late, coalesced",
            ["job", "kind"],
            registry=r,
        )
        self.takeovers = Counter(
            "anarchon_takeovers",
            "Runs this instance won by taking over an expired lease (won, attempt > 1)",
            ["job"],
            registry=r,
        )
        self.runs_fenced = Counter(
            "anarchon_runs_fenced", "Runs this instance was fenced out of (F1)", ["job"], registry=r
        )
        self.runs_finished = Counter(
            "anarchon_runs_finished",
            "Runs this instance finished, by job and status",
            ["job", "status"],
            registry=r,
        )
        self.store_errors = Counter(
            "anarchon_store_errors",
            "Store errors (transport errors once per outage), by operation",
            ["operation"],
            registry=r,
        )
        self.claim_latency = Histogram(
            "anarchon_claim_latency_seconds",
            "Time from sending a claim to its answer, resends included",
            ["job"],
            buckets=CLAIM_BUCKETS,
            registry=r,
        )
        self.run_duration = Histogram(
            "anarchon_run_duration_seconds",
            "How long runs took on this instance, by job and status",
            ["job", "status"],
            buckets=RUN_BUCKETS,
            registry=r,
        )
        self.fleet_slots = Counter(
            "anarchon_fleet_slots",
            "On stores with a member list: (job, slot)s by this instance's role, contender (claimed "
            "at the slot), fallback (found undecided after the grace and decided) or silent "
            "(already decided when read)",
            ["role"],
            registry=r,
        )
        self.fleet_wins = Counter(
            "anarchon_fleet_wins",
            "On stores with a member list: runs this instance won at their slot, by role",
            ["role"],
            registry=r,
        )
        self.runs = _Runs()
        r.register(self.runs)

    def unregister(self) -> None:
        """Remove every metric from the registry and stop the HTTP server, if this started one."""
        for collector in (
            self.claims,
            self.skips,
            self.takeovers,
            self.runs_fenced,
            self.runs_finished,
            self.store_errors,
            self.claim_latency,
            self.run_duration,
            self.fleet_slots,
            self.fleet_wins,
            self.runs,
        ):
            self.registry.unregister(collector)
        if self.server is not None:
            self.server.shutdown()
            self.server.server_close()
            self.server = None

    # -- hooks ----------------------------------------------------------------------------------
    @hookimpl
    def anarchon_claim_decided(
        self, request: ClaimRequest, claim: Claim, latency_ms: float
    ) -> None:
        self.claims.labels(request.job, str(claim.outcome)).inc()
        if claim.skip_kind is not None and claim.token == request.token:
            self.skips.labels(request.job, claim.skip_kind).inc()
        self.claim_latency.labels(request.job).observe(latency_ms / 1000)
        if claim.won and claim.attempt > 1:
            self.takeovers.labels(request.job).inc()

    @hookimpl
    def anarchon_run_started(self, job: str, slot: int, attempt: int) -> None:
        self.runs.started(job, slot, attempt)

    @hookimpl
    def anarchon_run_finished(
        self, job: str, slot: int, attempt: int, status: RunStatus, duration_ms: float
    ) -> None:
        self.runs.finished(job, slot, attempt)
        self.runs_finished.labels(job, str(status)).inc()
        self.run_duration.labels(job, str(status)).observe(duration_ms / 1000)

    @hookimpl
    def anarchon_run_fenced(self, job: str) -> None:
        self.runs_fenced.labels(job).inc()

    @hookimpl
    def anarchon_store_error(self, operation: str) -> None:
        self.store_errors.labels(operation).inc()

    @hookimpl
    def anarchon_fleet_slot(self, role: str, won: bool) -> None:
        self.fleet_slots.labels(role).inc()
        if won:
            self.fleet_wins.labels(role).inc()
