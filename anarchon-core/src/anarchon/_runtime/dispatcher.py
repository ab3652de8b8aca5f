"""`Dispatcher`: the running half of a `Scheduler`. It fires each slot by the store-corrected
clock (T2, T5, T6), claims it, starts the winners' executions (F1) and the backups' checks
(L10), and has the store prepare slots ahead where it can (`SupportsPrepare`).

Slots reached on time go out together (one `claim_many` for all jobs of a slot). A job whose
slots pile up (at start, after a stall, a clock jump or a wait for the store) gets a *lane*: a
queue that decides its slots one at a time in slot order, by its catch-up policy (T6), and
records the late ones skipped, so that no slot vanishes from the ledger. Triggered slots (X1)
come from the store (`control.TriggerPoller`) and are claimed alone, like a slot reached late.

On a store with a member list, `fleet` plans the roles of a slot's jobs: this instance claims
those it contends for at the slot, those it watches a grace later (the claim reads first), and
the silent ones only if their contenders and watchers all leave the list (DESIGN section 12).

Near 500 lines: a slot's way from the timetable to a claim (on time, in a lane, triggered, or as
a fleet's fallback) and on to an execution or a backup reads best in one class; the claims'
retries are `claimer`, the runs `running`, pauses and triggers `control`, the member list and
the roles `fleet`, the later claims of the slots it does not contend for `fleet_fallback`."""

from __future__ import annotations

import asyncio
import collections
import logging
import time
from collections.abc import Awaitable, Callable, Coroutine, Mapping, Sequence
from typing import Any

from .._claims import Claim, ClaimRequest, Outcome, Overlap, new_token
from ..abc import SupportsClaimMany, SupportsPrepare, SupportsTrigger
from .catch_up import LATE_RECORDS_MAX, CatchUp, late_skip, missed_skip
from .claimer import TRANSPORT_ERRORS, UNANSWERED, Claimer
from .context import RuntimeContext
from .control import PauseWatch, TriggerPoller
from .execution import Execution
from .fleet import Fleet
from .fleet_fallback import FleetFallback
from .jobs import JobSpec
from .running import Running
from .timetable import Timetable

__all__ = ["CATCH_UP_POLL_MS", "CLOCK_REFRESH_S", "MAX_SLEEP_S", "STOP_CLAIMS_WAIT_S", "Dispatcher"]

log = logging.getLogger("anarchon.scheduler")

MAX_SLEEP_S = 1.0
"""The dispatcher never sleeps longer than this, so a wall-clock jump is seen within a second (T5)."""
CLOCK_REFRESH_S = 60.0
CATCH_UP_POLL_MS = 200
"""With catch_up ``all``, an instance waiting for another's catch-up run to end checks at least
this often (a plain read, L10), so the job's next missed slot follows soon after."""
STOP_CLAIMS_WAIT_S = 2.0
"""At shutdown, how long claims already sent get to be answered (a run won meanwhile is
released at once)."""


class Dispatcher:
    """Everything a started scheduler does in the background, from `start()` to `stop()`, with
    the state `health()` reads: the runs executing here, the last claim per job."""

    def __init__(
        self,
        context: RuntimeContext,
        *,
        clock_skew_ms: int,
        claim_timeout_s: float,
        trigger_poll_ms: int = 0,
        fleet: Fleet | None = None,
    ) -> None:
        self.context = context
        self.fleet = fleet
        """The member list and this instance's roles, on stores with membership (M1); None:
        every instance claims every slot."""
        self._beating: asyncio.Task[None] | None = None
        self.store = context.store
        self.store_clock = context.clock
        self.clock_skew_ms = clock_skew_ms
        self.claim_timeout_s = claim_timeout_s
        self.trigger_poll_ms = trigger_poll_ms
        self.pauses = PauseWatch(self.store, self.spawn)
        """Which jobs the store answers ``skipped: paused`` for (P1), for logs and health."""
        self.triggers: TriggerPoller | None = None
        """Polls for triggered runs (X1), where the store has them and polling is on."""
        self.claimer = Claimer(context, timeout_s=claim_timeout_s)
        self.running = Running(context, self.spawn, self._watch_retry)
        self.last_claims: dict[str, tuple[int, Claim]] = {}
        self.tasks: set[asyncio.Task[Any]] = set()
        """The background tasks: slots, lanes, backups, preparations, clock readings."""
        self.task: asyncio.Task[None] | None = None
        """The timer loop, between `start()` and `stop()`."""
        self._stop = asyncio.Event()
        # Per job with a backlog: its slots waiting, ("due" | "late", slot), in slot order.
        self._lanes: dict[str, collections.deque[tuple[str, int]]] = {}
        self._jobs: Mapping[str, JobSpec] = {}
        # Per job, slots that turned late while the store did not answer: recorded skipped
        # (late) once it answers again, so an outage leaves no hole in the ledger.
        self._unrecorded: dict[str, list[int]] = {}
        # Per job, set once the batch claim of its last on-time slot is decided.
        self._deciding: dict[str, asyncio.Event] = {}

    @property
    def executions(self) -> set[Execution]:
        """The runs this instance is executing now."""
        return self.running.executions

    def start(
        self, jobs: Mapping[str, JobSpec], stop: asyncio.Event, *, since_ms: int | None = None
    ) -> None:
        """Begin dispatching `jobs` until `stop` is set (or `stop()` is called). `since_ms`:
        when the instance came up, for the slots it must decide at start (T6)."""
        self._stop = stop
        self._jobs = jobs
        self.claimer.start()
        if self.fleet is not None:
            self.fleet.set_jobs(jobs.values())
            self._beating = self.spawn(self.fleet.run(stop), "anarchon-fleet")
        self.task = asyncio.create_task(
            self.run(jobs, stop, since_ms=since_ms), name="anarchon-dispatcher"
        )
        store = self.store
        polls = self.trigger_poll_ms > 0 and store.capabilities.trigger
        if polls and isinstance(store, SupportsTrigger):
            self.triggers = TriggerPoller(
                store,
                jobs,
                clock=self.store_clock,
                claimer=self.claimer,
                poll_ms=self.trigger_poll_ms,
                clock_skew_ms=self.clock_skew_ms,
                claim=self.claim_triggered,
                capabilities=store.capabilities,
            )
            self.spawn(self.triggers.run(stop), "anarchon-poll-triggers")

    async def stop(self, grace_ms: int) -> None:
        """Stop claiming; let the claims already sent be answered (bounded: a run won meanwhile
        is released, not left holding its lease with nobody running it); let running jobs
        finish within `grace_ms`, then release their leases (L9); end every background task."""
        self._stop.set()
        self.claimer.stop()
        if self.task is not None:
            self.task.cancel()
        if self.fleet is not None:
            if self._beating is not None:
                await asyncio.gather(self._beating, return_exceptions=True)
                self._beating = None
            await self.fleet.leave()
        claiming = self._claiming()
        if claiming:
            await asyncio.wait(claiming, timeout=STOP_CLAIMS_WAIT_S)
        await self.running.stop(grace_ms)
        tasks = [*self.tasks, *self.running.tasks]
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)
        if self.task is not None:
            await asyncio.gather(self.task, return_exceptions=True)
            self.task = None

    def spawn(self, coro: Coroutine[Any, Any, Any], name: str) -> asyncio.Task[Any]:
        """Start a background task whose failure is reported and which `stop()` cancels."""
        task = asyncio.create_task(coro, name=name)
        self.tasks.add(task)
        task.add_done_callback(self._task_done)
        return task

    def _task_done(self, task: asyncio.Task[Any]) -> None:
        """Background tasks never fail silently: store errors count as an outage, anything else
        is logged with its traceback."""
        self.tasks.discard(task)
        if task.cancelled() or task.exception() is None:
            return
        exc = task.exception()
        assert exc is not None
        if isinstance(exc, TRANSPORT_ERRORS):
            self.context.health.failed(task.get_name(), exc)
        else:
            log.error("%s failed", task.get_name(), exc_info=exc, extra={"task": task.get_name()})

    async def run(
        self, jobs: Mapping[str, JobSpec], stop: asyncio.Event, *, since_ms: int | None = None
    ) -> None:
        """One timer for all jobs: sleep on the monotonic clock until the earliest slot (or
        preparation) is reached by the store-corrected clock (T2), never earlier; the timetable
        fires each job's slots in order, so a backward jump never fires one twice (T5).
        `since_ms`: when the instance came up, for the slots it must decide at start (T6)."""
        self._stop = stop
        self._jobs = jobs
        store = self.store
        ahead = store.prepare_ahead_ms if isinstance(store, SupportsPrepare) else 0
        timetable = Timetable(
            jobs,
            self.store_clock.now_ms(),
            clock_skew_ms=self.clock_skew_ms,
            prepare_ahead_ms=ahead,
            since_ms=since_ms,
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
                for name, late in due.late.items():
                    self._to_lane(name, [("late", slot) for slot in late])
                on_time = []
                for spec in due.fresh:
                    # A job whose last slot is still being decided (a slow store, one that does
                    # not answer) queues this one behind it, to be decided in order (T6).
                    waiting = spec.name in self._lanes or spec.name in self._deciding
                    if waiting or self._missed(spec, due.slot, now):
                        self._to_lane(spec.name, [("due", due.slot)])
                    else:
                        on_time.append(spec)
                if on_time:
                    self.spawn(self._claim_slot(on_time, due.slot), f"anarchon-slot-{due.slot}")
                continue
            wake_at = timetable.wake_at()
            assert wake_at is not None
            await asyncio.sleep(min(max(wake_at - now, 0) / 1000, MAX_SLEEP_S))

    def _missed(self, spec: JobSpec, slot: int, now: int) -> bool:
        """A later slot of the job is already due: `slot` was reached late (T6)."""
        assert spec.schedule is not None
        return spec.schedule.next_slot(slot) <= now

    def _to_lane(self, name: str, items: Sequence[tuple[str, int]]) -> None:
        lane = self._lanes.get(name)
        if lane is None:
            lane = self._lanes[name] = collections.deque()
            self.spawn(self._drain(name, lane), f"anarchon-lane-{name}")
        lane.extend(items)

    async def _drain(self, name: str, lane: collections.deque[tuple[str, int]]) -> None:
        """Decide a job's waiting slots one at a time, in slot order; the lane closes when it
        is empty, and the job's slots go out with the others again."""
        spec = self._jobs[name]
        try:
            while lane and not self._stop.is_set():
                deciding = self._deciding.get(name)
                if deciding is not None:
                    await deciding.wait()
                kind, slot = lane.popleft()
                now = self.store_clock.now_ms()
                if kind == "late" or now - slot > spec.max_late_ms + self.clock_skew_ms:
                    await self._claim_one(spec, slot, skip=late_skip(now - slot, spec.max_late_ms))
                elif self._missed(spec, slot, now):
                    await self._catch_up(spec, slot, now)
                elif spec.overlap is Overlap.SKIP:
                    # Reached through the lane, this slot is claimed late too: it runs to its
                    # end before the lane closes, so the job's next slot cannot overlap it.
                    execution = await self._claim_one(spec, slot, wait=True)
                    if execution is not None:
                        await execution.done.wait()
                else:
                    await self._claim_one(spec, slot)
        finally:
            if self._lanes.get(name) is lane:
                del self._lanes[name]

    async def _catch_up(self, spec: JobSpec, slot: int, now: int) -> None:
        """A missed slot, by the job's policy: ``all`` runs it to its end here or waits for
        whoever holds it; ``latest`` and ``none`` record it skipped."""
        policy = spec.catch_up or CatchUp.LATEST
        if policy is not CatchUp.ALL:
            assert spec.schedule is not None
            newest = spec.schedule.next_slot(slot)
            while (after := spec.schedule.next_slot(newest)) <= now:
                newest = after
            await self._claim_one(spec, slot, skip=missed_skip(policy, newest))
            return
        # One after another: a run of the job still going here (the last on-time slot) ends
        # first, so that it does not make this catch-up slot an overlap.
        for running in [e for e in self.executions if e.spec.name == spec.name]:
            await running.done.wait()
        execution = await self._claim_one(spec, slot, wait=True)
        if execution is not None:
            await execution.done.wait()

    def claim_triggered(self, spec: JobSpec, slot: int, max_late_ms: int) -> None:
        """Claim a triggered slot (X1) in the background, like any slot: the winner runs it,
        the others back it up (L10)."""
        if self._stop.is_set():
            return
        self.spawn(
            self._claim_one(spec, slot, max_late_ms=max_late_ms),
            f"anarchon-trigger-{spec.name}-{slot}",
        )

    async def _claim_one(
        self,
        spec: JobSpec,
        slot: int,
        *,
        skip: str | None = None,
        wait: bool = False,
        max_late_ms: int | None = None,
    ) -> Execution | None:
        """Claim one slot of a job. Won: start the run (returned, so a caller may wait for
        it). Running: back up the holder (L10), in the background, or here with `wait`."""
        request = self._request(spec, slot, skip=skip, max_late_ms=max_late_ms)
        sent_at = time.monotonic()
        claim = await self.claimer.claim(self.store.claim, request)
        return await self._answered(spec, request, claim, sent_at, wait=wait)

    def _note(self, name: str, slot: int, claim: Claim) -> None:
        """Keep the answer for `health()`. A slot the store never answered for is kept to be
        recorded later; once the store answers again, the kept slots go to the job's lane."""
        self.last_claims[name] = (slot, claim)
        self.pauses.note(name, slot, claim)
        kept = self._unrecorded.get(name)
        if claim.outcome is Outcome.LATE and claim.reason.startswith(UNANSWERED):
            kept = self._unrecorded.setdefault(name, [])
            kept.append(slot)
            del kept[:-LATE_RECORDS_MAX]
        elif kept:
            del self._unrecorded[name]
            self._to_lane(name, [("late", old) for old in kept])

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

    def _request(
        self,
        spec: JobSpec,
        slot: int,
        *,
        skip: str | None = None,
        max_late_ms: int | None = None,
    ) -> ClaimRequest:
        return ClaimRequest(
            job=spec.name,
            slot=slot,
            token=new_token(),
            instance=self.context.instance,
            lease_ms=spec.lease_ms,
            max_late_ms=spec.max_late_ms if max_late_ms is None else max_late_ms,
            overlap=spec.overlap or Overlap.ALLOW,
            attempts=spec.claim_attempts,
            skip_reason=skip,
        )

    async def _claim_slot(self, specs: Sequence[JobSpec], slot: int) -> None:
        """The slot's claims for the jobs reached on time, in one batch where the store can.
        Until they are decided, each job's next slots wait in its lane (a slow or absent store
        must not let two slots of a job be decided out of order). In a fleet, only the jobs
        this instance contends for; the others go to a `FleetFallback`."""
        if self.fleet is not None:
            plan = self.fleet.plan(specs, slot)
            specs = plan.now
            if plan.watch or plan.silent:
                fallback = FleetFallback(
                    fleet=self.fleet,
                    clock=self.store_clock,
                    stop=self._stop,
                    deciding=self._deciding,
                    read=self._read_slot,
                )
                self.spawn(fallback.run(plan, slot), f"anarchon-slot-{slot}-fallback")
            if not specs:
                return
        requests = [self._request(spec, slot) for spec in specs]
        sent_at = time.monotonic()
        deciding = asyncio.Event()
        for spec in specs:
            self._deciding[spec.name] = deciding
        try:
            claims = await self._claim_all(requests, self.store.claim)
        finally:
            deciding.set()
            for spec in specs:
                if self._deciding.get(spec.name) is deciding:
                    del self._deciding[spec.name]
        if self.fleet is not None:
            self.fleet.claimed(requests, claims)
        for spec, request, claim in zip(specs, requests, claims, strict=True):
            await self._answered(spec, request, claim, sent_at)

    async def _claim_all(
        self, requests: Sequence[ClaimRequest], single: Callable[[ClaimRequest], Awaitable[Claim]]
    ) -> list[Claim]:
        """Claim `requests` (one slot's) in one batch where the store can, else each with
        `single` (the store's claim, or `check` on a lease store), concurrently."""
        store = self.store
        if len(requests) > 1 and isinstance(store, SupportsClaimMany):
            return await self.claimer.claim_many(store.claim_many, requests)
        return list(await asyncio.gather(*(self.claimer.claim(single, r) for r in requests)))

    async def _answered(
        self,
        spec: JobSpec,
        request: ClaimRequest,
        claim: Claim,
        sent_at: float,
        *,
        wait: bool = False,
    ) -> Execution | None:
        """What follows a claim of the slot: won, its run starts (returned, so a caller may
        wait for it); running, a backup (L10) in the background, or here with `wait`."""
        slot = request.slot
        self._note(spec.name, slot, claim)
        if claim.won:
            return await self._execute(spec, request, claim, sent_at)
        if claim.outcome is Outcome.RUNNING and self.context.lease_store is not None:
            if wait:
                return await self._backup(spec, slot, poll_ms=CATCH_UP_POLL_MS)
            self.spawn(self._backup(spec, slot), f"anarchon-backup-{spec.name}-{slot}")
        return None

    async def _read_slot(self, specs: Sequence[JobSpec], slot: int, orphan: bool) -> None:
        """Claim `specs` after their slot, in one batch where the store can (the claim reads
        first: a decided slot answers without a write); `check` where only it is single."""
        requests = [self._request(spec, slot) for spec in specs]
        sent_at = time.monotonic()
        lease_store = self.context.lease_store
        claims = await self._claim_all(
            requests, self.store.claim if lease_store is None else lease_store.check
        )
        assert self.fleet is not None
        for spec, request, claim in zip(specs, requests, claims, strict=True):
            self.fleet.read(request, claim, orphan=orphan)
            await self._answered(spec, request, claim, sent_at)

    async def _execute(
        self, spec: JobSpec, request: ClaimRequest, claim: Claim, sent_at: float
    ) -> Execution | None:
        """Start the run this instance won; while stopping, release it instead (L9), so that a
        claim answered during shutdown neither runs nor holds its lease until it runs out."""
        if self._stop.is_set():
            await self.running.release_unstarted(request)
            return None
        return self.running.start(spec, request, claim, sent_at)

    def _claiming(self) -> list[asyncio.Task[Any]]:
        """The tasks sending claims now (slots, lanes, backups), for `stop()` to let finish."""
        kinds = ("anarchon-slot-", "anarchon-lane-", "anarchon-backup-", "anarchon-trigger-")
        return [t for t in self.tasks if t.get_name().startswith(kinds)]

    def _watch_retry(self, spec: JobSpec, slot: int, delay_ms: int) -> None:
        """L12: a run that failed here waits `delay_ms` for its retry; watch for it like a
        backup (with a new token: the old one would answer the failed attempt, L2), first
        when the wait ends, so that an instance alone in its fleet retries too."""
        if self._stop.is_set() or self.context.lease_store is None:
            return
        self.spawn(
            self._backup(spec, slot, first_ms=delay_ms + 1), f"anarchon-backup-{spec.name}-{slot}"
        )

    async def _backup(
        self,
        spec: JobSpec,
        slot: int,
        *,
        poll_ms: int | None = None,
        first_ms: int | None = None,
    ) -> Execution | None:
        """L10: check every heartbeat (or `poll_ms`, if sooner; the first time after
        `first_ms`, if given) until the run is done or this instance wins a takeover; returns
        the takeover's execution."""
        store = self.context.lease_store
        assert store is not None
        request = self._request(spec, slot)
        every_ms = spec.heartbeat_ms if poll_ms is None else min(poll_ms, spec.heartbeat_ms)
        wait_ms = every_ms if first_ms is None else first_ms
        while not self._stop.is_set():
            try:
                await asyncio.wait_for(self._stop.wait(), wait_ms / 1000)
                return None
            except asyncio.TimeoutError:
                pass
            wait_ms = every_ms
            sent_at = time.monotonic()
            claim = await self.claimer.call(
                "check", lambda: store.check(request), give_up=lambda: False
            )
            if claim is None:
                return None
            if claim.won:
                self.last_claims[spec.name] = (slot, claim)
                self.claimer.decided(request, claim, time.perf_counter())
                return await self._execute(spec, request, claim, sent_at)
            if claim.outcome is not Outcome.RUNNING:
                return None
            if claim.lease_until is not None:
                # Check again as the lease (or a retry's wait, L12) ends, if that is sooner;
                # never more often than every 10 ms, whatever the clocks' offset.
                left_ms = claim.lease_until - self.store_clock.now_ms() + 1
                wait_ms = min(every_ms, max(left_ms, 10))
        return None
