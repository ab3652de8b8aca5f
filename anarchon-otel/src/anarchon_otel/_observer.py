"""The observer: a span per claim and per run, and the Prometheus plugin's metrics mirrored."""

from __future__ import annotations

import threading
import time
from collections.abc import Iterable
from contextvars import Token
from typing import Any

from opentelemetry import context, metrics, trace
from opentelemetry.context import Context
from opentelemetry.metrics import CallbackOptions, MeterProvider, Observation
from opentelemetry.trace import SpanKind, Status, StatusCode, TracerProvider

from anarchon import Claim, ClaimRequest, RunStatus, __version__, hookimpl

__all__ = ["OtelObserver"]

SCOPE = "anarchon"

_RunKey = tuple[str, int, int, str]


class OtelObserver:
    """An anarchon observer that records spans and metrics through the OpenTelemetry API.

    Without providers it uses the global ones (set by your SDK setup or
    ``opentelemetry-instrument``); without an SDK everything is a no-op. Register it with the
    plugin manager, or let `anarchon_otel.configure()` do it through the installed entry point.

    Spans: ``anarchon.claim`` (one per decided claim, spanning its latency) and ``anarchon.run``
    (from start to finish of a run this instance won; an async job's own spans are its children).
    Attributes: ``anarchon.job``, ``anarchon.slot``, ``anarchon.attempt``, ``anarchon.outcome``
    or ``anarchon.status``, ``anarchon.instance``.
    """

    def __init__(
        self,
        *,
        tracer_provider: TracerProvider | None = None,
        meter_provider: MeterProvider | None = None,
    ) -> None:
        self.tracer = trace.get_tracer(SCOPE, __version__, tracer_provider=tracer_provider)
        meter = metrics.get_meter(SCOPE, __version__, meter_provider=meter_provider)
        self._lock = threading.Lock()
        self._runs: dict[_RunKey, tuple[trace.Span, Token[Context], float]] = {}
        self.claims = meter.create_counter(
            "anarchon.claims", unit="{claim}", description="Claims decided, by job and outcome"
        )
        self.takeovers = meter.create_counter(
            "anarchon.takeovers",
            unit="{run}",
            description="Runs won by taking over an expired lease (won, attempt > 1)",
        )
        self.runs_fenced = meter.create_counter(
            "anarchon.runs.fenced", unit="{run}", description="Runs this instance was fenced out of"
        )
        self.runs_finished = meter.create_counter(
            "anarchon.runs.finished", unit="{run}", description="Runs finished, by job and status"
        )
        self.store_errors = meter.create_counter(
            "anarchon.store.errors", unit="{error}", description="Store errors, by operation"
        )
        self.claim_duration = meter.create_histogram(
            "anarchon.claim.duration",
            unit="s",
            description="Time from sending a claim to its answer",
        )
        self.run_duration = meter.create_histogram(
            "anarchon.run.duration", unit="s", description="How long runs took, by job and status"
        )
        self.fleet_slots = meter.create_counter(
            "anarchon.fleet.slots",
            unit="{slot}",
            description="(job, slot)s by this instance's fleet role: contender, fallback, silent",
        )
        self.fleet_wins = meter.create_counter(
            "anarchon.fleet.wins", unit="{run}", description="Runs won at their slot, by role"
        )
        self.runs_active = meter.create_up_down_counter(
            "anarchon.runs.active", unit="{run}", description="Runs this instance is executing"
        )
        meter.create_observable_gauge(
            "anarchon.lease.age",
            callbacks=[self._lease_ages],
            unit="s",
            description="Seconds since this instance won the oldest run of the job it still runs",
        )

    def _lease_ages(self, options: CallbackOptions) -> Iterable[Observation]:
        now = time.monotonic()
        oldest: dict[str, float] = {}
        with self._lock:
            for (job, _, _, _), (_, _, since) in self._runs.items():
                oldest[job] = min(oldest.get(job, since), since)
        return [Observation(now - since, {"anarchon.job": job}) for job, since in oldest.items()]

    # -- hooks ----------------------------------------------------------------------------------
    @hookimpl
    def anarchon_claim_decided(
        self, store: str, request: ClaimRequest, claim: Claim, latency_ms: float
    ) -> None:
        end = time.time_ns()
        attributes: dict[str, Any] = {
            "anarchon.job": request.job,
            "anarchon.slot": request.slot,
            "anarchon.attempt": claim.attempt,
            "anarchon.outcome": str(claim.outcome),
            "anarchon.instance": request.instance,
            "anarchon.store": store,
        }
        if claim.holder is not None:
            attributes["anarchon.holder"] = claim.holder
        if claim.reason:
            attributes["anarchon.reason"] = claim.reason
        if claim.skip_kind is not None:
            attributes["anarchon.skip"] = claim.skip_kind
        span = self.tracer.start_span(
            "anarchon.claim",
            kind=SpanKind.CLIENT,
            start_time=end - int(latency_ms * 1_000_000),
            attributes=attributes,
        )
        span.end(end_time=end)
        labels = {"anarchon.job": request.job, "anarchon.outcome": str(claim.outcome)}
        if claim.skip_kind is not None:
            labels["anarchon.skip"] = claim.skip_kind
        self.claims.add(1, labels)
        self.claim_duration.record(latency_ms / 1000, {"anarchon.job": request.job})
        if claim.won and claim.attempt > 1:
            self.takeovers.add(1, {"anarchon.job": request.job})

    @hookimpl
    def anarchon_run_started(self, job: str, slot: int, attempt: int, instance: str) -> None:
        span = self.tracer.start_span(
            "anarchon.run",
            kind=SpanKind.INTERNAL,
            attributes={
                "anarchon.job": job,
                "anarchon.slot": slot,
                "anarchon.attempt": attempt,
                "anarchon.instance": instance,
            },
        )
        # Called in the run's task just before the job starts: an async job inherits this
        # context, so its own spans become children of the run's.
        token = context.attach(trace.set_span_in_context(span))
        with self._lock:
            self._runs[(job, slot, attempt, instance)] = (span, token, time.monotonic())
        self.runs_active.add(1, {"anarchon.job": job})

    @hookimpl
    def anarchon_run_finished(
        self,
        job: str,
        slot: int,
        attempt: int,
        instance: str,
        status: RunStatus,
        error: str | None,
        duration_ms: float,
        recorded: bool,
    ) -> None:
        with self._lock:
            entry = self._runs.pop((job, slot, attempt, instance), None)
        labels = {"anarchon.job": job, "anarchon.status": str(status)}
        self.runs_finished.add(1, labels)
        self.run_duration.record(duration_ms / 1000, labels)
        if entry is None:
            return
        span, token, _ = entry
        self.runs_active.add(-1, {"anarchon.job": job})
        span.set_attribute("anarchon.status", str(status))
        span.set_attribute("anarchon.recorded", recorded)
        if status is RunStatus.FAILED:
            span.set_status(Status(StatusCode.ERROR, error))
        span.end()
        # Same task as run_started, so the token belongs to this context (OTel logs, never
        # raises, if it does not).
        context.detach(token)

    @hookimpl
    def anarchon_run_fenced(
        self, job: str, slot: int, attempt: int, instance: str, reason: str
    ) -> None:
        self.runs_fenced.add(1, {"anarchon.job": job})
        with self._lock:
            entry = self._runs.get((job, slot, attempt, instance))
        if entry is not None:
            entry[0].add_event("anarchon.fenced", {"anarchon.reason": reason})

    @hookimpl
    def anarchon_store_error(self, store: str, operation: str, error: BaseException) -> None:
        self.store_errors.add(1, {"anarchon.operation": operation})

    @hookimpl
    def anarchon_fleet_slot(self, instance: str, role: str, won: bool) -> None:
        labels = {"anarchon.role": role, "anarchon.instance": instance}
        self.fleet_slots.add(1, labels)
        if won:
            self.fleet_wins.add(1, labels)
