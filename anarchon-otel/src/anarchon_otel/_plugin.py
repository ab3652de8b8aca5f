"""The ``otel`` entry point: forwards events to the configured observer, if any."""

from __future__ import annotations

from anarchon import Claim, ClaimRequest, RunStatus
from anarchon.plugins import StartedScheduler, hookimpl

from ._config import active, configure_from_env


@hookimpl
def anarchon_scheduler_started(scheduler: StartedScheduler) -> None:
    configure_from_env()


@hookimpl
def anarchon_claim_decided(
    store: str, request: ClaimRequest, claim: Claim, latency_ms: float
) -> None:
    observer = active()
    if observer is not None:
        observer.anarchon_claim_decided(
            store=store, request=request, claim=claim, latency_ms=latency_ms
        )


@hookimpl
def anarchon_run_started(job: str, slot: int, attempt: int, instance: str) -> None:
    observer = active()
    if observer is not None:
        observer.anarchon_run_started(job=job, slot=slot, attempt=attempt, instance=instance)


@hookimpl
def anarchon_run_finished(
    job: str,
    slot: int,
    attempt: int,
    instance: str,
    status: RunStatus,
    error: str | None,
    duration_ms: float,
    recorded: bool,
) -> None:
    observer = active()
    if observer is not None:
        observer.anarchon_run_finished(
            job=job,
            slot=slot,
            attempt=attempt,
            instance=instance,
            status=status,
            error=error,
            duration_ms=duration_ms,
            recorded=recorded,
        )


@hookimpl
def anarchon_run_fenced(job: str, slot: int, attempt: int, instance: str, reason: str) -> None:
    observer = active()
    if observer is not None:
        observer.anarchon_run_fenced(
            job=job, slot=slot, attempt=attempt, instance=instance, reason=reason
        )


@hookimpl
def anarchon_store_error(store: str, operation: str, error: BaseException) -> None:
    observer = active()
    if observer is not None:
        observer.anarchon_store_error(store=store, operation=operation, error=error)


@hookimpl
def anarchon_fleet_slot(instance: str, role: str, won: bool) -> None:
    observer = active()
    if observer is not None:
        observer.anarchon_fleet_slot(instance=instance, role=role, won=won)
