"""Spans and metrics through the OpenTelemetry SDK's in-memory exporter and reader."""

from __future__ import annotations

import asyncio
from collections.abc import Iterator
from typing import Any

import pytest
from opentelemetry import trace
from opentelemetry.sdk.metrics import MeterProvider
from opentelemetry.sdk.metrics.export import InMemoryMetricReader
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from opentelemetry.trace import StatusCode

import anarchon_otel
from anarchon import MemoryStore, Run, Scheduler
from anarchon.plugins import plugin_manager


class Telemetry:
    def __init__(self) -> None:
        self.spans = InMemorySpanExporter()
        self.tracer_provider = TracerProvider()
        self.tracer_provider.add_span_processor(SimpleSpanProcessor(self.spans))
        self.reader = InMemoryMetricReader()
        self.meter_provider = MeterProvider(metric_readers=[self.reader])

    def metrics(self) -> dict[str, list[Any]]:
        data = self.reader.get_metrics_data()
        found: dict[str, list[Any]] = {}
        assert data is not None
        for resource in data.resource_metrics:
            for scope in resource.scope_metrics:
                for metric in scope.metrics:
                    found[metric.name] = list(metric.data.data_points)
        return found


@pytest.fixture
def telemetry(monkeypatch: pytest.MonkeyPatch) -> Iterator[Telemetry]:
    monkeypatch.delenv(anarchon_otel.ENABLED_ENV, raising=False)
    t = Telemetry()
    anarchon_otel.configure(tracer_provider=t.tracer_provider, meter_provider=t.meter_provider)
    yield t
    anarchon_otel.disable()
    t.meter_provider.shutdown()


def test_the_plugin_is_found_through_the_entry_point() -> None:
    assert "otel" in plugin_manager().plugin_names()


async def test_a_span_per_claim_and_per_run_with_attributes(telemetry: Telemetry) -> None:
    store = MemoryStore.create("otel-spans")
    a, b = (Scheduler(store, instance=name, environ={}) for name in ("a", "b"))
    inner: list[trace.Span] = []
    done = asyncio.Event()
    for s in (a, b):

        @s.job("* * * * * *", name="tick", max_late="500ms")
        async def tick(run: Run) -> None:
            inner.append(trace.get_current_span())
            if run.slot:
                raise RuntimeError("boom")

        @s.job("0 0 1 1 *", name="never")
        def never() -> None: ...

    def finished_runs() -> list[Any]:
        return [x for x in telemetry.spans.get_finished_spans() if x.name == "anarchon.run"]

    async with a, b:
        for _ in range(500):
            if finished_runs():
                done.set()
                break
            await asyncio.sleep(0.01)
    assert done.is_set(), "no run span was finished"
    spans = telemetry.spans.get_finished_spans()
    claims = [x for x in spans if x.name == "anarchon.claim"]
    runs = finished_runs()
    slot = runs[0].attributes["anarchon.slot"]
    of_slot = [c for c in claims if c.attributes and c.attributes["anarchon.slot"] == slot]
    outcomes = sorted(str(c.attributes["anarchon.outcome"]) for c in of_slot if c.attributes)
    assert outcomes.count("won") == 1, outcomes
    won = next(c for c in of_slot if c.attributes and c.attributes["anarchon.outcome"] == "won")
    assert won.attributes is not None
    assert won.attributes["anarchon.job"] == "tick"
    assert won.attributes["anarchon.attempt"] == 1
    assert won.attributes["anarchon.instance"] in ("a", "b")
    assert won.end_time is not None and won.start_time is not None
    assert won.end_time >= won.start_time
    run = runs[0]
    assert run.attributes is not None
    assert run.attributes["anarchon.job"] == "tick"
    assert run.attributes["anarchon.attempt"] == 1
    assert run.attributes["anarchon.status"] == "failed"
    assert run.status.status_code is StatusCode.ERROR
    assert "boom" in (run.status.description or "")
    # The async job ran inside the run's span.
    assert inner and inner[0].get_span_context().span_id == run.context.span_id


async def test_metrics_are_mirrored(telemetry: Telemetry) -> None:
    s = Scheduler(MemoryStore.create(), instance="a", environ={})
    started = asyncio.Event()

    @s.job("* * * * * *", name="tick", max_late="500ms")
    async def tick() -> None:
        started.set()

    async with s:
        await asyncio.wait_for(started.wait(), 5)
        for _ in range(300):
            if "anarchon.run.duration" in telemetry.metrics():
                break
            await asyncio.sleep(0.01)
    found = telemetry.metrics()
    won = [p for p in found["anarchon.claims"] if p.attributes.get("anarchon.outcome") == "won"]
    assert won and won[0].value >= 1 and won[0].attributes["anarchon.job"] == "tick"
    assert found["anarchon.claim.duration"][0].count >= 1
    assert found["anarchon.run.duration"][0].attributes["anarchon.status"] == "succeeded"
    assert sum(p.value for p in found["anarchon.runs.active"]) == 0


def test_store_errors_and_fencing_are_counted(telemetry: Telemetry) -> None:
    pm = plugin_manager()
    pm.store_error(store="memory://", operation="claim", error=ConnectionError("down"))
    pm.run_fenced(job="tick", slot=0, attempt=1, instance="a", reason="test")
    found = telemetry.metrics()
    assert found["anarchon.store.errors"][0].attributes == {"anarchon.operation": "claim"}
    assert found["anarchon.runs.fenced"][0].value == 1


def test_enabled_by_environment_only_when_asked() -> None:
    anarchon_otel.disable()
    assert anarchon_otel.configure_from_env({}) is None
    try:
        assert anarchon_otel.configure_from_env({anarchon_otel.ENABLED_ENV: "1"}) is not None
    finally:
        anarchon_otel.disable()


def test_fleet_roles_are_counted(telemetry: Telemetry) -> None:
    pm = plugin_manager()
    pm.fleet_slot(store="memory://", instance="a", job="tick", slot=0, role="contender", won=True)
    pm.fleet_slot(store="memory://", instance="a", job="tick", slot=0, role="silent", won=False)
    found = telemetry.metrics()
    roles = {p.attributes["anarchon.role"]: p.value for p in found["anarchon.fleet.slots"]}
    assert roles == {"contender": 1, "silent": 1}
    [wins] = found["anarchon.fleet.wins"]
    assert (wins.value, wins.attributes["anarchon.role"]) == (1, "contender")
