"""The ``prometheus`` entry point: forwards events to the configured metrics, if any."""

from __future__ import annotations

from anarchon import Claim, ClaimRequest, RunStatus
from anarchon.plugins import StartedScheduler, hookimpl

from ._config import active, configure_from_env


@hookimpl
def anarchon_scheduler_started(scheduler: StartedScheduler) -> None:
    configure_from_env()


@hookimpl
def anarchon_claim_decided(request: ClaimRequest, claim: Claim, latency_ms: float) -> None:
    metrics = active()
    if metrics is not None:
        metrics.anarchon_claim_decided(request=request, claim=claim, latency_ms=latency_ms)


@hookimpl
def anarchon_run_started(job: str, slot: int, attempt: int) -> None:
    metrics = active()
    if metrics is not None:
        metrics.anarchon_run_started(job=job, slot=slot, attempt=attempt)


@hookimpl
def anarchon_run_finished(
    job: str, slot: int, attempt: int, status: RunStatus, duration_ms: float
) -> None:
    metrics = active()
    if metrics is not None:
        metrics.anarchon_run_finished(
            job=job, slot=slot, attempt=attempt, status=status, duration_ms=duration_ms
        )


@hookimpl
def anarchon_run_fenced(job: str) -> None:
    metrics = active()
    if metrics is not None:
        metrics.anarchon_run_fenced(job=job)


@hookimpl
def anarchon_store_error(operation: str) -> None:
    metrics = active()
    if metrics is not None:
        metrics.anarchon_store_error(operation=operation)


@hookimpl
def anarchon_fleet_slot(role: str, won: bool) -> None:
    metrics = active()
    if metrics is not None:
        metrics.anarchon_fleet_slot(role=role, won=won)
