"""`Dispatcher`: the running half of a `Scheduler`. It fires each slot by the store-corrected
clock (T2, T5, T6), claims it, starts the winners' executions (F1) and the backups' checks
(L10), and has the store prepare slots ahead where it can (`SupportsPrepare`)."""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Mapping, Sequence
from typing import Any

from ._claiming import TRANSPORT_ERRORS, Claimer, StoreHealth
from ._claims import Claim, ClaimRequest, Outcome, Overlap, new_token
from ._clock import StoreClock
from ._jobs import JobSpec, call_job
from ._runner import Execution
from ._timetable import Timetable
from .abc import ClaimStore, LeaseStore, SupportsClaimMany, SupportsPrepare
from .plugins import PluginManager

__all__ = ["CLOCK_REFRESH_S", "MAX_SLEEP_S", "Dispatcher"]

log = logging.getLogger("anarchon.scheduler")

MAX_SLEEP_S = 1.0
"""The dispatcher never sleeps longer than this, so a wall-clock jump is seen within a second (T5)."""
CLOCK_REFRESH_S = 60.0


class Dispatcher:
    """Everything a started scheduler does in the background, with the state `health()` and
    `stop()` read: the executions running here, the last claim per job, the background tasks."""

    def __init__(
        self,
        *,
        store: ClaimStore,
        instance: str,
        store_clock: StoreClock,
        claimer: Claimer,
        store_health: StoreHealth,
        events: PluginManager,
        clock_skew_ms: int,
        claim_timeout_s: float,
    ) -> None:
        self.store = store
        self.instance = instance
        self.store_clock = store_clock
        self.claimer = claimer
        self.store_health = store_health
        self.events = events
        self.clock_skew_ms = clock_skew_ms
        self.claim_timeout_s = claim_timeout_s
        self.executions: set[Execution] = set()
        self.last_claims: dict[str, tuple[int, Claim]] = {}
        self.tasks: set[asyncio.Task[Any]] = set()
        self._stop = asyncio.Event()

    def spawn(self, coro: Any, name: str) -> None:
        task = asyncio.create_task(coro, name=name)
        self.tasks.add(task)
        task.add_done_callback(self._task_done)

    def _task_done(self, task: asyncio.Task[Any]) -> None:
        """Background tasks never fail silently: store errors count as an outage, anything else
        is logged with its traceback."""
        self.tasks.discard(task)
        if task.cancelled() or task.exception() is None:
            return
        exc = task.exception()
        assert exc is not None
        if isinstance(exc, TRANSPORT_ERRORS):
            self.store_health.failed(task.get_name(), exc)
        else:
            log.error("%s failed", task.get_name(), exc_info=exc, extra={"task": task.get_name()})

    async def run(self, jobs: Mapping[str, JobSpec], stop: asyncio.Event) -> None:
        """One timer for all jobs: sleep on the monotonic clock until the earliest slot (or
        preparation) is reached by the store-corrected clock (T2), never earlier; the timetable
        fires each job's slots in order, so a backward jump never fires one twice (T5)."""
        self._stop = stop
        store = self.store
        ahead = store.prepare_ahead_ms if isinstance(store, SupportsPrepare) else 0
        timetable = Timetable(
            jobs,
            self.store_clock.now_ms(),
            clock_skew_ms=self.clock_skew_ms,
            prepare_ahead_ms=ahead,
        )
        next_refresh = time.monotonic() + CLOCK_REFRESH_S
        while timetable:
            if time.monotonic() >= next_refresh:
                self.spawn(self.store_clock.measure(), "anarchon-clock")
                next_refresh = time.monotonic() + CLOCK_REFRESH_S
            now = self.store_clock.now_ms()
            for slot, names in timetable.prepares_due(now):
                self.spawn(self._prepare(names, slot), f"anarchon-prepare-{slot}")
            due = timetable.slot_due(now)
            if due is not None:
                slot, fresh = due
                if fresh:
                    self.spawn(self._claim_slot(fresh, slot), f"anarchon-slot-{slot}")
                continue
            wake_at = timetable.wake_at()
            assert wake_at is not None
            await asyncio.sleep(min(max(wake_at - now, 0) / 1000, MAX_SLEEP_S))

    async def _prepare(self, jobs: Sequence[str], slot: int) -> None:
        """The store's groundwork for a coming slot. Best effort: a failure is logged and the
        claims do the work themselves (a store outage is reported by the claims, once)."""
        store = self.store
        assert isinstance(store, SupportsPrepare)
        # It may take until the slot (thousands of queues), and then one claim's time.
        until_slot_s = max(slot - self.store_clock.now_ms(), 0) / 1000
        try:
            await asyncio.wait_for(store.prepare(jobs, slot), until_slot_s + self.claim_timeout_s)
        except asyncio.CancelledError:
            raise
        except TRANSPORT_ERRORS as exc:
            log.debug("preparing slot %s of %d job(s) failed: %s", slot, len(jobs), exc)
        except Exception:
            log.warning(
                "preparing slot %s of %d job(s) failed",
                slot,
                len(jobs),
                exc_info=True,
                extra={"slot": slot},
            )

    def _request(self, spec: JobSpec, slot: int, token: str | None = None) -> ClaimRequest:
        return ClaimRequest(
            job=spec.name,
            slot=slot,
            token=token or new_token(),
            instance=self.instance,
            lease_ms=spec.lease_ms,
            max_late_ms=spec.max_late_ms,
            overlap=spec.overlap or Overlap.ALLOW,
            attempts=spec.attempts,
        )

    async def _claim_slot(self, specs: Sequence[JobSpec], slot: int) -> None:
        requests = [self._request(spec, slot) for spec in specs]
        sent_at = time.monotonic()
        store = self.store
        if len(requests) > 1 and isinstance(store, SupportsClaimMany):
            claims = await self.claimer.claim_many(store.claim_many, requests)
        else:
            claims = list(
                await asyncio.gather(*(self.claimer.claim(store.claim, r) for r in requests))
            )
        for spec, request, claim in zip(specs, requests, claims, strict=True):
            self.last_claims[spec.name] = (slot, claim)
            if claim.won:
                await self._execute(spec, request, claim, sent_at)
            elif claim.outcome is Outcome.RUNNING and isinstance(store, LeaseStore):
                self.spawn(self._backup(spec, slot), f"anarchon-backup-{spec.name}-{slot}")

    async def _execute(
        self, spec: JobSpec, request: ClaimRequest, claim: Claim, sent_at: float
    ) -> None:
        execution = Execution(
            spec=spec,
            body=lambda run: call_job(spec, run),
            store=self.store,
            attempt=claim.attempt,
            slot=request.slot,
            token=request.token,
            sent_at=sent_at,
            instance=self.instance,
            health=self.store_health,
            events=self.events,
        )
        self.executions.add(execution)
        task = asyncio.create_task(execution(), name=f"anarchon-run-{spec.name}-{request.slot}")
        self.tasks.add(task)

        def finished(t: asyncio.Task[Any]) -> None:
            self.tasks.discard(t)
            self.executions.discard(execution)

        task.add_done_callback(finished)

    async def _backup(self, spec: JobSpec, slot: int) -> None:
        """L10: check every heartbeat until the run is done or this instance wins a takeover."""
        store = self.store
        assert isinstance(store, LeaseStore)
        request = self._request(spec, slot)
        while not self._stop.is_set():
            try:
                await asyncio.wait_for(self._stop.wait(), spec.heartbeat_ms / 1000)
                return
            except asyncio.TimeoutError:
                pass
            sent_at = time.monotonic()
            claim = await self.claimer.call(
                "check", lambda: store.check(request), give_up=lambda: False
            )
            if claim is None:
                return
            if claim.won:
                self.last_claims[spec.name] = (slot, claim)
                self.claimer._decided(request, claim, time.perf_counter())
                await self._execute(spec, request, claim, sent_at)
                return
            if claim.outcome is not Outcome.RUNNING:
                return
