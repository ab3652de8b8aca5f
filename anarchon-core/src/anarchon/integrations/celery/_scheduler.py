"""`Scheduler`: a Celery beat scheduler that sends each entry once per slot across beat nodes."""

from __future__ import annotations

import concurrent.futures
import heapq
import logging
import time
from collections.abc import Callable
from concurrent.futures import Future
from typing import Any

import attrs
from celery import beat
from celery.schedules import BaseSchedule, schedstate

from ..._claims import Claim, ClaimRequest, Overlap
from ..._connect import create_store
from ..._errors import ConfigError
from ..._runs import RunStatus
from ..._urls import redact, shown_url
from ._settings import LEASE_MS, BeatSettings, read_settings
from ._slots import EntrySlots, from_ms, job_name, slots_for
from ._store_thread import StoreThread

__all__ = ["Scheduler"]

log = logging.getLogger("anarchon.celery")

SLOT_HEADER = "anarchon_slot"
"""The message header that carries the slot (epoch ms) of each task beat sends."""


def _now_ms() -> int:
    return time.time_ns() // 1_000_000


@attrs.define
class _EntryState:
    """What this node knows of one entry: its job, its slots, the last slot it decided."""

    job: str
    schedule: BaseSchedule | None
    slots: EntrySlots
    decided: int | None = None
    """The newest slot this node claimed; None until its first claim."""

    def due(self, now_ms: int, max_late_ms: int) -> int | None:
        """The slot to claim now: the newest slot at or before now that this node has not
        claimed. Before its first claim, only one at most `max_late_ms` old (the slot a node
        sends at start if all nodes missed it); later, slots that fell due while this node was
        up are claimed however late, so the store records them (late ones as skipped)."""
        if self.decided is None:
            return self.slots.latest(now_ms, since_ms=now_ms - max_late_ms)
        return self.slots.latest(now_ms, since_ms=self.decided + 1)


@attrs.define
class _Pending:
    """A claim whose answer beat did not wait for: sent once it answers won."""

    entry: beat.ScheduleEntry
    request: ClaimRequest
    answer: Future[Claim]


class Scheduler(beat.Scheduler):
    """Celery beat scheduler that runs on every node and sends each due entry once per slot.

    Set ``beat_scheduler = "anarchon.integrations.celery:Scheduler"`` (or
    ``celery beat -S anarchon.integrations.celery:Scheduler``) and ``anarchon_store`` to a store
    every beat node reaches. Each node computes the same slot for a due entry (interval entries:
    the multiples of the interval since the Unix epoch; crontab entries: the fire instant), and
    claims (entry, slot) through anarchon before sending; only the node that wins sends.

    Settings (Celery configuration):

    * ``anarchon_store`` (required): the store URL, e.g. ``redis://host:6379/0``.
    * ``anarchon_instance``: this node's id in history and logs; default ``host:pid:xxxx``.
    * ``anarchon_prefix``: the deployment's namespace in the store; default the store's own.
    * ``anarchon_max_late``: how late a slot may still be sent (seconds, a timedelta or a
      string like ``"2m"``); default 60 s. A node that starts sends the newest slot of each entry
      if no node sent it and it is at most this old.

    Each task it sends carries its slot in the ``anarchon_slot`` header (epoch milliseconds),
    which the task reads as ``self.request.anarchon_slot``.
    """

    claim_wait_s: float = 0.5
    """How long beat's loop waits for a claim's answer before it goes on; a claim answered
    later (the store is slow or down) is sent at the next tick, if won."""

    def __init__(self, app: Any, *args: Any, **kwargs: Any) -> None:
        self._settings: BeatSettings | None = None
        self._store: StoreThread | None = None
        self._states: dict[str, _EntryState] = {}
        self._pending: list[_Pending] = []
        super().__init__(app, *args, **kwargs)

    # Setting up and closing

    def setup_schedule(self) -> None:
        """Load the entries, read the settings, check every entry and open the store."""
        super().setup_schedule()
        settings = read_settings(self.app.conf)
        options = {} if settings.prefix is None else {"prefix": settings.prefix}
        try:
            store = create_store(settings.store, **options)
        except ConfigError as exc:
            raise ConfigError(f"anarchon_store: {exc}") from None
        store_name = shown_url(settings.store)
        settings.check_memory(store.capabilities, store_name)
        self._settings = settings
        for entry in self.schedule.values():
            self._state(entry)  # a bad entry stops beat now, not at its first slot
        self._store = StoreThread(store, store_name=store_name, instance=settings.instance)
        self._store.jobs = sorted(state.job for state in self._states.values())
        log.info(
            "anarchon: beat node %s sends each entry once per slot, claimed in %s",
            settings.instance,
            store_name,
        )
        try:
            self._store.open(timeout_s=10.0)
        except BaseException:  # beat exits: stop the store's thread with it
            self._store.close()
            raise

    def close(self) -> None:
        """Send what was won meanwhile (2 s at most), then close the broker and the store."""
        try:
            if self._pending:
                concurrent.futures.wait([p.answer for p in self._pending], timeout=2.0)
                self._send_answered()
            super().close()
        finally:
            if self._store is not None:
                self._store.close()

    @property
    def info(self) -> str:
        """The line ``celery beat`` shows under its banner."""
        try:
            settings = self._settings or read_settings(self.app.conf)
        except ConfigError as exc:
            return f"    . anarchon -> {exc}"
        return f"    . anarchon -> {shown_url(settings.store)} (instance {settings.instance})"

    # Deciding what is due

    def _state(self, entry: beat.ScheduleEntry) -> _EntryState:
        name = entry.name or ""
        state = self._states.get(name)
        if state is None or state.schedule is not entry.schedule:
            slots = slots_for(name, entry.schedule)
            if state is None:
                state = _EntryState(job=job_name(name), schedule=entry.schedule, slots=slots)
                self._states[name] = state
                if state.job != name:
                    log.debug("anarchon: beat entry %r is job %r", name, state.job)
            else:  # a schedule changed in place: new slots, the same history
                state.schedule, state.slots = entry.schedule, slots
        return state

    def _max_late_ms(self) -> int:
        assert self._settings is not None, "setup_schedule() was not called"
        return self._settings.max_late_ms

    def is_due(self, entry: beat.ScheduleEntry) -> tuple[bool, float]:
        """Due when the entry has a slot at or before now that this node has not claimed;
        the second value is the seconds until the entry's next slot."""
        state = self._state(entry)
        now = _now_ms()
        slot = state.due(now, self._max_late_ms())
        following = state.slots.after(now)
        # +1 ms: `now` was rounded down, and waking early only costs another tick.
        return schedstate(slot is not None, (following - now + 1) / 1000)

    def adjust(self, n: Any, drift: float = 0.0) -> Any:
        """Wake at the slot, not 10 ms before it as Celery's default drift does (a slot is an
        exact instant here; waking early would spin until it)."""
        return n

    def populate_heap(
        self,
        event_t: Any = beat.event_t,
        heapify: Callable[[list[Any]], None] = heapq.heapify,
    ) -> None:
        """Order the entries by this scheduler's `is_due`, not by Celery's last-run times."""
        when: Callable[[beat.ScheduleEntry, float], float] = self._when  # type: ignore[attr-defined]
        heap: list[Any] = []
        for entry in self.schedule.values():
            try:
                due, delay = self.is_due(entry)
            except Exception:  # noqa: BLE001 - Celery's way: one bad entry must not stop beat
                due, delay = self._is_due_failed(entry)  # type: ignore[attr-defined]
            heap.append(event_t(when(entry, 0 if due else delay) or 0, 5, entry))
        heapify(heap)
        self._heap = heap

    def tick(self, *args: Any, **kwargs: Any) -> float:
        """One pass of beat's loop: first send what claims answered since the last pass."""
        self._send_answered()
        delay = float(super().tick(*args, **kwargs))
        if self._pending:  # look again soon for their answers
            delay = min(delay, 0.05)
        return delay

    # Claiming and sending

    def apply_entry(self, entry: beat.ScheduleEntry, producer: Any = None) -> None:
        """Claim the entry's due slot; send it if this node wins."""
        assert self._store is not None and self._settings is not None
        state = self._state(entry)
        slot = state.due(_now_ms(), self._settings.max_late_ms)
        if slot is None:
            return
        state.decided = slot
        request = ClaimRequest(
            job=state.job,
            slot=slot,
            instance=self._settings.instance,
            lease_ms=LEASE_MS,
            max_late_ms=self._settings.max_late_ms,
            overlap=Overlap.ALLOW,
            attempts=1,
        )
        answer = self._store.claim(request)
        try:
            claim = answer.result(timeout=self.claim_wait_s)
        except concurrent.futures.TimeoutError:
            log.debug("anarchon: %s@%s: waiting for the store's answer", request.job, slot)
            self._pending.append(_Pending(entry, request, answer))
            return
        self._decided(entry, request, claim, producer)

    def _send_answered(self) -> None:
        answered = [p for p in self._pending if p.answer.done()]
        if not answered:
            return
        self._pending = [p for p in self._pending if not p.answer.done()]
        for pending in answered:
            self._decided(pending.entry, pending.request, pending.answer.result(), self.producer)

    def _decided(
        self, entry: beat.ScheduleEntry, request: ClaimRequest, claim: Claim, producer: Any
    ) -> None:
        assert self._store is not None
        if not claim.won:
            log.debug(
                "anarchon: not sending %s (slot %s): %s%s",
                entry.name,
                from_ms(request.slot).isoformat(),
                claim.outcome,
                f" ({claim.reason})" if claim.reason else "",
            )
            return
        log.info(
            "Scheduler: Sending due task %s (%s), slot %s",
            entry.name,
            entry.task,
            from_ms(request.slot).isoformat(),
        )
        options = dict(entry.options or {})
        options["headers"] = {**(options.get("headers") or {}), SLOT_HEADER: request.slot}
        stamped = self.Entry(**{**dict(entry), "options": options})  # type: ignore[arg-type]
        try:
            self.apply_async(stamped, producer=producer, advance=False)
        except Exception as exc:
            log.exception("Message Error: could not send %s (%s)", entry.name, entry.task)
            self._store.finish(request, RunStatus.FAILED, redact(f"{type(exc).__name__}: {exc}"))
        else:
            self._store.finish(request, RunStatus.SUCCEEDED)
