"""Control through the store, as a running scheduler sees it: pauses (P1) and triggers (X1).

A pause needs nothing from the scheduler: the claim itself answers ``skipped: paused``. The
scheduler only says so once per job while it lasts (`PauseWatch`), not once per slot, and shows
the paused jobs in `health()`.

A trigger is a record in the store; every instance polls for them (`TriggerPoller`, one
``triggers(since)`` call every ``trigger_poll``) and claims each trigger of its jobs like any
slot, so exactly one wins it, with the usual leases, backups and fencing."""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable, Coroutine, Mapping
from datetime import datetime, timezone
from typing import Any

from .._capabilities import Capabilities
from .._claims import Claim, Outcome
from .._control import PAUSED, Pause, Trigger
from .._durations import MAX_LATE_MS
from ..abc import ClaimStore, SupportsPause, SupportsTrigger
from .claimer import UNANSWERED, Claimer
from .clock import StoreClock
from .jobs import JobSpec

__all__ = [
    "TRIGGER_MIN_LATE_MS",
    "TRIGGER_POLLS_LATE",
    "PauseWatch",
    "TriggerPoller",
    "trigger_max_late_ms",
]

log = logging.getLogger("anarchon.scheduler")

TRIGGER_MIN_LATE_MS = 60_000
"""A triggered run may start this long after its trigger at least (the job's ``max_late`` if
longer): an instance that was restarting, or a store that was briefly away, still runs it."""
TRIGGER_POLLS_LATE = 3
"""... and at least this many poll intervals, so that a long ``trigger_poll`` still finds it."""


def trigger_max_late_ms(
    spec: JobSpec, poll_ms: int, caps: Capabilities | None = None, *, clock_skew_ms: int = 0
) -> int:
    """The ``max_late`` of a triggered slot of `spec`: the job's, but at least a minute and three
    polls; past it, the claim records the trigger ``skipped: late`` (L1) instead of running it.
    On a store that forgets claims (`caps.remembers_ms`), no longer than the memory rule allows
    (T3; the job's own ``max_late`` was checked against it at start)."""
    late = max(spec.max_late_ms, TRIGGER_MIN_LATE_MS, TRIGGER_POLLS_LATE * poll_ms)
    if caps is not None and caps.remembers_ms is not None:
        horizon = spec.claim_attempts * spec.lease_ms if caps.leases else 0
        late = min(late, max(spec.max_late_ms, caps.remembers_ms - clock_skew_ms - horizon))
    return min(late, MAX_LATE_MS)


def _iso(ms: int) -> str:
    when = datetime.fromtimestamp(ms / 1000, timezone.utc).isoformat(timespec="seconds")
    return when.replace("+00:00", "Z")


def is_paused_claim(claim: Claim) -> bool:
    """A claim the store answered ``skipped: paused`` (P1)."""
    return claim.outcome is Outcome.SKIPPED and claim.skip_kind == PAUSED


class PauseWatch:
    """Per job, whether its last claims said it is paused: logged once when a pause is first
    seen (with its end, read from the store) and once when claims go on again; `paused` is
    what `health()` shows."""

    def __init__(
        self, store: ClaimStore, spawn: Callable[[Coroutine[Any, Any, None], str], object]
    ) -> None:
        self._store = store
        self._spawn = spawn
        self.paused: dict[str, str] = {}
        """By job, the reason of the claim that said it is paused (``paused: deploy``)."""
        self._since_slot: dict[str, int] = {}

    def note(self, job: str, slot: int, claim: Claim) -> None:
        if is_paused_claim(claim):
            if job not in self.paused:
                self._spawn(self._tell(job, claim.reason), f"anarchon-paused-{job}")
            self.paused[job] = claim.reason
            self._since_slot[job] = max(slot, self._since_slot.get(job, slot))
            return
        if job not in self.paused or slot <= self._since_slot.get(job, slot):
            return  # an older slot's answer says nothing about the pause
        if claim.outcome is Outcome.LATE and claim.reason.startswith(UNANSWERED):
            return  # the store did not answer: nothing is known
        del self.paused[job]
        self._since_slot.pop(job, None)
        log.info(
            "job %s is no longer paused: its slots are claimed again",
            job,
            extra={"job": job, "slot": slot},
        )

    async def _tell(self, job: str, reason: str) -> None:
        pause: Pause | None = None
        if isinstance(self._store, SupportsPause):
            try:
                pause = next((p for p in await self._store.pauses() if p.job == job), None)
            except Exception as exc:  # noqa: BLE001 - only the log line's detail is lost
                log.debug("reading the pause of job %s failed: %s", job, exc)
        until = "resumed"
        if pause is not None and pause.until_ms is not None:
            until = _iso(pause.until_ms)
        why = reason.partition(":")[2].strip()
        by = f" by {pause.by}" if pause is not None and pause.by else ""
        log.info(
            "job %s is paused%s%s: slots skipped until %s",
            job,
            f" ({why})" if why else "",
            by,
            until,
            extra={"job": job, "reason": reason, "until": until},
        )


Claim_ = Callable[[JobSpec, int, int], None]


class TriggerPoller:
    """Asks the store for triggers every `poll_ms` and hands each trigger of a job this
    instance has, once, to `claim(spec, slot, max_late_ms)`. Each poll reads the triggers of
    the last few ``max_late`` (one call): a trigger written just before this instance started
    is found, and one that is too old to run is recorded ``skipped: late`` by its claim."""

    def __init__(
        self,
        store: SupportsTrigger,
        jobs: Mapping[str, JobSpec],
        *,
        clock: StoreClock,
        claimer: Claimer,
        poll_ms: int,
        clock_skew_ms: int,
        claim: Claim_,
        capabilities: Capabilities | None = None,
    ) -> None:
        self._store = store
        self._jobs = jobs
        self._clock = clock
        self._claimer = claimer
        self.poll_ms = poll_ms
        self._claim = claim
        self._late_ms = {
            name: trigger_max_late_ms(spec, poll_ms, capabilities, clock_skew_ms=clock_skew_ms)
            for name, spec in jobs.items()
        }
        longest = max(self._late_ms.values(), default=0)
        self.look_back_ms = longest + clock_skew_ms + poll_ms
        """How far back each poll reads: a trigger older than that is late for every job."""
        self._seen: dict[tuple[str, int], int] = {}
        """Triggers already handled here, with when they were written."""

    async def run(self, stop: asyncio.Event) -> None:
        while not stop.is_set():
            await self.poll()
            try:
                await asyncio.wait_for(stop.wait(), self.poll_ms / 1000)
            except asyncio.TimeoutError:
                pass

    async def poll(self) -> list[Trigger]:
        """One read of the store; the triggers it handed to `claim`."""
        since = self._clock.now_ms() - self.look_back_ms
        found = await self._claimer.call(
            "triggers", lambda: self._store.triggers(since), give_up=lambda: True
        )
        if found is None:
            return []  # the outage is logged once by the claimer; the next poll tries again
        for key, written in list(self._seen.items()):
            if written < since:
                del self._seen[key]
        handed = []
        for trigger in found:
            key = (trigger.job, trigger.slot)
            if key in self._seen:
                continue
            self._seen[key] = trigger.requested_at
            spec = self._jobs.get(trigger.job)
            if spec is None:
                log.debug(
                    "trigger of job %s (slot %s) ignored: this instance does not have the job",
                    trigger.job,
                    trigger.slot,
                    extra={"job": trigger.job, "slot": trigger.slot},
                )
                continue
            log.info(
                "job %s was triggered%s%s: claiming slot %s",
                trigger.job,
                f" by {trigger.by}" if trigger.by else "",
                f" ({trigger.reason})" if trigger.reason else "",
                trigger.slot,
                extra={"job": trigger.job, "slot": trigger.slot, "triggered": True},
            )
            self._claim(spec, trigger.slot, self._late_ms[spec.name])
            handed.append(trigger)
        return handed
