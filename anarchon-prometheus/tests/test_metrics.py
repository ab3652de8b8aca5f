"""Metric values after a scripted sequence of real claims and a real fenced run on SQLite."""

from __future__ import annotations

import asyncio
import time
import urllib.request
from collections.abc import Iterator
from pathlib import Path

import pytest
from prometheus_client import CollectorRegistry

import anarchon_prometheus
from anarchon import Claim, ClaimRequest, ConfigError, MemoryStore, Outcome, Run, Scheduler
from anarchon.plugins import plugin_manager
from anarchon_sqlite import SQLiteStore, testing


@pytest.fixture
def registry(monkeypatch: pytest.MonkeyPatch) -> Iterator[CollectorRegistry]:
    monkeypatch.delenv(anarchon_prometheus.PORT_ENV, raising=False)
    registry = CollectorRegistry()
    anarchon_prometheus.configure(registry)
    yield registry
    anarchon_prometheus.disable()


def value(registry: CollectorRegistry, name: str, **labels: str) -> float:
    sample = registry.get_sample_value(name, labels)
    return 0.0 if sample is None else sample


def test_the_plugin_is_found_through_the_entry_point() -> None:
    assert "prometheus" in plugin_manager().plugin_names()


async def decide(store: SQLiteStore, request: ClaimRequest) -> Outcome:
    """Claim for real and report it the way the scheduler does."""
    started = time.perf_counter()
    claim = await store.claim(request)
    plugin_manager().claim_decided(
        store=str(store.url),
        request=request,
        claim=claim,
        latency_ms=(time.perf_counter() - started) * 1000,
    )
    return claim.outcome


async def test_claims_by_outcome_takeovers_and_latency(
    registry: CollectorRegistry, tmp_path: Path
) -> None:
    store = SQLiteStore.create(tmp_path / "m.db")
    await store.open()
    now = await store.now_ms()
    slot = now - now % 1000
    a = ClaimRequest(job="report", slot=slot, instance="a", lease_ms=60_000, max_late_ms=5_000)
    b = ClaimRequest(job="report", slot=slot, instance="b", lease_ms=60_000, max_late_ms=5_000)
    try:
        assert await decide(store, a) is Outcome.WON
        assert await decide(store, b) is Outcome.RUNNING
        old = ClaimRequest(job="report", slot=slot - 600_000, instance="b", max_late_ms=1_000)
        assert await decide(store, old) is Outcome.SKIPPED
        nxt = ClaimRequest(job="report", slot=slot + 1000, instance="b", max_late_ms=5_000)
        assert await decide(store, nxt) is Outcome.SKIPPED
        # Another instance hears of the same skip: counted as a claim, not as a second skip.
        again = ClaimRequest(job="report", slot=slot + 1000, instance="c", max_late_ms=5_000)
        assert await decide(store, again) is Outcome.SKIPPED
        testing.force_expire(tmp_path / "m.db", "cron", "report", slot)
        c = ClaimRequest(job="report", slot=slot, instance="c", max_late_ms=5_000)
        assert await decide(store, c) is Outcome.WON
    finally:
        await store.close()
    claims = "anarchon_claims_total"
    assert value(registry, claims, job="report", outcome="won") == 2
    assert value(registry, claims, job="report", outcome="running") == 1
    assert value(registry, claims, job="report", outcome="skipped") == 3
    skips = "anarchon_skips_total"
    assert value(registry, skips, job="report", kind="late") == 1
    assert value(registry, skips, job="report", kind="overlap") == 1
    assert value(registry, "anarchon_takeovers_total", job="report") == 1
    assert value(registry, "anarchon_claim_latency_seconds_count", job="report") == 6
    assert 0 < value(registry, "anarchon_claim_latency_seconds_sum", job="report") < 5


async def test_a_fenced_run_counts_and_the_running_gauge_returns_to_zero(
    registry: CollectorRegistry, tmp_path: Path
) -> None:
    path = tmp_path / "f.db"
    store = SQLiteStore.create(path)
    s = Scheduler(store, instance="a", environ={})
    started, cancelled = asyncio.Event(), asyncio.Event()
    held: list[Run] = []

    @s.job("* * * * * *", lease="600ms", max_late="300ms", overlap="allow")
    async def slow(run: Run) -> None:
        held.append(run)
        started.set()
        try:
            await asyncio.sleep(30)
        except asyncio.CancelledError:
            cancelled.set()
            raise

    await store.open()
    try:
        async with s:
            await asyncio.wait_for(started.wait(), 5)
            assert value(registry, "anarchon_running_jobs", job="slow") == 1
            assert value(registry, "anarchon_lease_age_seconds", job="slow") >= 0
            run = held[0]
            testing.force_expire(path, "cron", "slow", run.slot)
            other = ClaimRequest(job="slow", slot=run.slot, instance="b", lease_ms=10_000)
            assert (await store.claim(other)).attempt == 2
            await asyncio.wait_for(cancelled.wait(), 3)
            deadline = time.monotonic() + 3
            while value(registry, "anarchon_runs_fenced_total", job="slow") < 1:
                assert time.monotonic() < deadline, "the fenced run was not counted"
                await asyncio.sleep(0.01)
            while value(registry, "anarchon_runs_finished_total", job="slow", status="failed") < 1:
                assert time.monotonic() < deadline, "the fenced run never finished"
                await asyncio.sleep(0.01)
            s.request_stop()
    finally:
        await store.close()
    assert value(registry, "anarchon_running_jobs", job="slow") == 0
    assert value(registry, "anarchon_run_duration_seconds_count", job="slow", status="failed") >= 1
    assert value(registry, "anarchon_claims_total", job="slow", outcome="won") >= 1


def test_store_errors_are_counted(registry: CollectorRegistry) -> None:
    plugin_manager().store_error(store="memory://", operation="renew", error=ConnectionError())
    assert value(registry, "anarchon_store_errors_total", operation="renew") == 1


def test_installed_but_not_configured_is_inactive(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv(anarchon_prometheus.PORT_ENV, raising=False)
    assert anarchon_prometheus.active() is None
    request = ClaimRequest(job="x", slot=0, instance="a")
    claim = Claim(outcome=Outcome.WON, attempt=1)
    plugin_manager().claim_decided(store="memory://", request=request, claim=claim, latency_ms=1)
    assert anarchon_prometheus.configure_from_env() is None


async def test_the_port_from_the_environment_serves_metrics_when_a_scheduler_starts(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv(anarchon_prometheus.PORT_ENV, "0")
    monkeypatch.setenv(anarchon_prometheus.ADDR_ENV, "127.0.0.1")
    s = Scheduler("memory://", instance="a", environ={})

    @s.job("0 0 1 1 *")
    def yearly() -> None: ...

    try:
        async with s:
            metrics = anarchon_prometheus.active()
            assert metrics is not None and metrics.port
            url = f"http://127.0.0.1:{metrics.port}/metrics"
            body = await asyncio.to_thread(lambda: urllib.request.urlopen(url, timeout=5).read())
        assert b"# TYPE anarchon_claims_total counter" in body
    finally:
        anarchon_prometheus.disable()


def test_a_bad_port_in_the_environment_is_named() -> None:
    with pytest.raises(ConfigError, match="ANARCHON_PROMETHEUS_PORT"):
        anarchon_prometheus.configure_from_env({anarchon_prometheus.PORT_ENV: "http"})


@pytest.mark.slow
async def test_fleet_roles_and_wins_are_counted(registry: CollectorRegistry) -> None:
    """Two instances on one memory:// store, one contender per slot: each (job, slot) is one
    contender claim and one silent read, and the wins add up to the runs."""
    runs: list[int] = []
    fleet = [
        Scheduler(
            MemoryStore.create("prom-fleet"),
            instance=name,
            contenders=1,
            fleet_refresh="100ms",
            environ={},
        )
        for name in ("a", "b")
    ]
    for s in fleet:
        s.add_job(lambda run: runs.append(run.slot), "* * * * * *", name="tick")
    for s in fleet:
        await s.start()
    try:
        deadline = time.monotonic() + 8
        while value(registry, "anarchon_fleet_slots_total", role="silent") < 2:
            assert time.monotonic() < deadline, "no silent read was counted"
            await asyncio.sleep(0.01)
    finally:
        for s in fleet:
            await s.stop()
    wins = sum(
        value(registry, "anarchon_fleet_wins_total", role=role)
        for role in ("contender", "fallback")
    )
    assert wins == len(runs) >= 2
    assert value(registry, "anarchon_fleet_slots_total", role="fallback") == 0
