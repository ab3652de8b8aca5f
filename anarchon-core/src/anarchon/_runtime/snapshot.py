"""`health_snapshot`: a scheduler's `Health` from the parts that know it."""

from __future__ import annotations

import time
from collections.abc import Collection, Mapping

from .._claims import Claim
from .._urls import redact
from .clock import StoreClock
from .execution import Execution
from .fleet import Fleet
from .health import Health, LastClaim, RunningJob
from .store_health import StoreHealth

__all__ = ["health_snapshot"]


def health_snapshot(
    *,
    instance: str,
    started: bool,
    started_at: int | None,
    store_open: bool,
    store_health: StoreHealth,
    store_clock: StoreClock,
    executions: Collection[Execution],
    last_claims: Mapping[str, tuple[int, Claim]],
    paused: Mapping[str, str] | None = None,
    fleet: Fleet | None = None,
    store_notices: Collection[str] = (),
) -> Health:
    """A scheduler's `Health` from its parts, with monotonic times turned into epoch ms."""
    now_wall, now_mono = time.time(), time.monotonic()

    def wall_ms(mono: float | None) -> int | None:
        return None if mono is None else int((now_wall - (now_mono - mono)) * 1000)

    return Health(
        instance=instance,
        store=store_health.store_name,
        started=started,
        started_at=started_at,
        store_open=store_open,
        store_reachable=store_health.down_since is None,
        damaged_jobs=dict(store_health.damaged),
        paused=dict(sorted((paused or {}).items())),
        members=fleet.members if fleet is not None else (),
        fleet_stats=fleet.counters.as_stats() if fleet is not None else {},
        store_notices=tuple(redact(text) for text in store_notices),
        store_down_since=wall_ms(store_health.down_since),
        last_error=store_health.last_error,
        clock_offset_ms=store_clock.offset_ms,
        clock_round_trip_ms=store_clock.round_trip_ms,
        running=tuple(
            sorted(
                (
                    RunningJob(
                        job=e.run.job,
                        slot=e.run.slot,
                        attempt=e.run.attempt,
                        started_at=e.started_at,
                        fenced=e.run.fenced,
                    )
                    for e in executions
                ),
                key=lambda r: (r.job, r.slot),
            )
        ),
        last_claims={
            job: LastClaim(
                slot=slot,
                outcome=claim.outcome,
                attempt=claim.attempt,
                holder=claim.holder,
                lease_until=claim.lease_until,
            )
            for job, (slot, claim) in sorted(last_claims.items())
        },
    )
