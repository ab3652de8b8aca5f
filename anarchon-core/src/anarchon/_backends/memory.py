"""`memory://name`: the reference implementation of the lease rules, in one process.

It is the model the conformance kit compares every backend against, so it follows DESIGN section 5
to the letter and nothing more. Stores opened with the same name in one process share their runs
(so several "instances" can race in a test); the clock is injectable. It also keeps the rules of
control through the store: pauses (P1) and triggers (X1), and the fleet's member list (M1), under
the same lock as the claims.
"""

from __future__ import annotations

import functools
import threading
import time
from collections.abc import Callable, Mapping, Sequence
from typing import ClassVar

import attrs

from .._capabilities import Capabilities
from .._claims import Claim, ClaimRequest
from .._control import Pause, Trigger, check_control_text, pause_skip_reason
from .._errors import ConfigError, StoreCorrupt, StoreNotSetUp
from .._fleet import Member
from .._leases import (
    decide_claim,
    decide_finish,
    keep_until,
    late_reason,
    skip_record,
    skipped_claim,
)
from .._names import check_name, shown
from .._options import StoreOptions
from .._retries import append_try
from .._runs import HistoryReader, RunRecord, RunStatus
from .._urls import StoreURL
from ..abc import LeaseStore
from .memory_members import MemberTable

__all__ = ["MemoryOptions", "MemoryStore"]

Clock = Callable[[], int]

TRIGGERS_KEPT_MS = 86_400_000
"""How long a trigger is listed (X1): a day, as `remembers_ms` is None (runs are never
forgotten while they could still be asked about)."""


def wall_clock_ms() -> int:
    return time.time_ns() // 1_000_000


@attrs.frozen(kw_only=True)
class MemoryOptions(StoreOptions):
    """`memory://` has only the common options."""


@attrs.define
class _Job:
    runs: dict[int, RunRecord] = attrs.Factory(dict)
    keep: dict[int, int] = attrs.Factory(dict)
    floor: int | None = None


@attrs.define
class _Namespace:
    lock: threading.Lock = attrs.Factory(threading.Lock)
    jobs: dict[tuple[str, str], _Job] = attrs.Factory(dict)
    opened: set[str] = attrs.Factory(set)
    """The prefixes a store of this namespace was opened with (`open`): what "set up" means for
    `open_read_only`, as a schema created at open is for a database."""
    pauses: dict[tuple[str, str], Pause] = attrs.Factory(dict)
    """(prefix, job): the job's pause, active or ended by its `until_ms` (P1)."""
    triggers: dict[str, list[Trigger]] = attrs.Factory(dict)
    """prefix: its triggers, oldest first (X1)."""
    members: MemberTable = attrs.Factory(MemberTable)
    """The fleet's members (M1), per prefix."""


_namespaces: dict[str, _Namespace] = {}
_namespaces_lock = threading.Lock()


class MemoryStore(LeaseStore):
    """In-process lease store. ``memory://`` alone is private to the store object;
    ``memory://name`` is shared by every store of that name in the process."""

    Options: ClassVar[type[StoreOptions]] = MemoryOptions

    def __init__(self, url: StoreURL, options: StoreOptions, *, clock: Clock | None = None) -> None:
        self.url = url
        self.options = options
        self.clock: Clock = clock or wall_clock_ms
        name = url.host or url.path
        if name:
            check_name(name, what="memory store name")
            with _namespaces_lock:
                self._ns = _namespaces.setdefault(name, _Namespace())
        else:
            self._ns = _Namespace()

    @classmethod
    def create(
        cls, name: str = "", *, clock: Clock | None = None, **options: object
    ) -> MemoryStore:
        """Build a store directly (tests, examples): ``MemoryStore.create("demo", clock=...)``."""
        from .._options import structure_options

        url = StoreURL.parse(f"memory://{name}")
        opts = structure_options(MemoryOptions, options, where="memory://")
        return cls(url, opts, clock=clock)

    @property
    def capabilities(self) -> Capabilities:
        return Capabilities(
            leases=True,
            self_recognition=True,
            fencing=True,
            overlap=True,
            history=True,
            store_clock=True,
            skips=True,
            batch=True,
            pause=True,
            trigger=True,
            retries=True,
            membership=True,
            remembers_ms=None,
        )

    async def open(self) -> None:
        with self._ns.lock:
            self._ns.opened.add(self.options.prefix)

    async def open_read_only(self) -> None:
        """`SupportsReadOnly` (R1): `StoreNotSetUp` unless a store of this name was opened with
        this prefix, or holds runs of it. Changes nothing."""
        with self._ns.lock:
            prefix = self.options.prefix
            if prefix in self._ns.opened or self._jobs_locked():
                return
            if self._ns.triggers.get(prefix) or any(p == prefix for p, _ in self._ns.pauses):
                return
            if self._ns.members.has(prefix):
                return
        name = self.url.host or self.url.path
        where = f"memory://{name}" if name else "memory:// (a store private to its object)"
        raise StoreNotSetUp(
            f"{where} holds no anarchon data for prefix {prefix!r}: no store of this name was "
            "opened with this prefix in this process. memory:// stores live inside one process, "
            "so another process (the anarchon command) always finds them empty; name a store "
            "of this process, or use a store other processes can reach (sqlite:///anarchon.db)"
        )

    async def close(self) -> None:
        return None

    async def now_ms(self) -> int:
        return self.clock()

    def _job(self, job: str) -> _Job:
        return self._ns.jobs.setdefault((self.options.prefix, job), _Job())

    def _claim_locked(self, request: ClaimRequest, now: int) -> Claim:
        state = self._job(request.job)
        run = state.runs.get(request.slot)

        def other_live() -> int | None:
            return next(
                (
                    r.slot
                    for r in state.runs.values()
                    if r.status is RunStatus.RUNNING
                    and r.slot != request.slot
                    and r.lease_until is not None
                    and r.lease_until >= now
                ),
                None,
            )

        floor = None if run is not None else self._floor(request.job, state)
        pause = self._ns.pauses.get((self.options.prefix, request.job))
        if run is None and pause is not None and pause.active(now):
            claim, write = self._decide_paused(request, now, floor, pause)
        else:
            claim, write = decide_claim(run, request, now, floor=floor, other_live=other_live)
        if write is not None:
            state.runs[request.slot] = write
            if run is None:
                state.keep[request.slot] = keep_until(request, self.options.retention_margin_ms)
                self._sweep(state, now)
        return claim

    @staticmethod
    def _decide_paused(
        request: ClaimRequest, now: int, floor: int | None, pause: Pause
    ) -> tuple[Claim, RunRecord | None]:
        """P1 for a slot with no run of a paused job: a forgotten or late slot answers as L1
        says (nothing can run it anyway); any other is recorded ``skipped: paused``, whatever
        the request's own skip_reason or overlap."""
        if late_reason(request, now, floor) is not None:
            return decide_claim(None, request, now, floor=floor, other_live=lambda: None)
        record = skip_record(request, now, pause_skip_reason(pause))
        return skipped_claim(record), record

    def _floor(self, job: str, state: _Job) -> int | None:
        floor: object = state.floor
        if floor is None or (isinstance(floor, int) and not isinstance(floor, bool)):
            return floor
        raise StoreCorrupt(
            f"floor of job {job!r} (prefix {self.options.prefix!r}) in {self.url} is "
            f"{shown(floor)}; expected a slot in epoch milliseconds: only a backdoor writes "
            "such a value, open a store of another name"
        )

    def _sweep(self, state: _Job, now: int) -> None:
        """L11: forget runs past retention beyond the newest `history_limit`; raise the floor."""
        excess = len(state.runs) - self.options.history_limit
        if excess <= 0:
            return
        for slot in sorted(state.runs)[:excess]:
            run = state.runs[slot]
            live = run.status is RunStatus.RUNNING and (run.lease_until or 0) >= now
            if state.keep[slot] >= now or live:
                break
            del state.runs[slot], state.keep[slot]
            state.floor = slot if state.floor is None else max(state.floor, slot)

    async def claim(self, request: ClaimRequest) -> Claim:
        with self._ns.lock:
            return self._claim_locked(request, self.clock())

    async def claim_many(self, requests: Sequence[ClaimRequest]) -> list[Claim]:
        with self._ns.lock:
            now = self.clock()
            return [self._claim_locked(r, now) for r in requests]

    async def check(self, request: ClaimRequest) -> Claim:
        with self._ns.lock:
            now = self.clock()
            run = self._job(request.job).runs.get(request.slot)
            if run is not None and (
                run.status.finished or (run.lease_until is not None and run.lease_until >= now)
            ):
                claim, _ = decide_claim(run, request, now, floor=None, other_live=lambda: None)
                return claim
            return self._claim_locked(request, now)

    def _update(
        self, job: str, slot: int, token: str, change: Callable[[RunRecord, int], RunRecord]
    ) -> bool:
        with self._ns.lock:
            state = self._job(job)
            run = state.runs.get(slot)
            if run is None or run.status is not RunStatus.RUNNING or run.token != token:
                return False
            state.runs[slot] = change(run, self.clock())
            return True

    async def renew(self, job: str, slot: int, token: str, lease_ms: int) -> bool:
        return self._update(
            job, slot, token, lambda r, now: attrs.evolve(r, lease_until=now + lease_ms)
        )

    async def finish(
        self, job: str, slot: int, token: str, status: RunStatus, error: str | None = None
    ) -> bool:
        if not status.finished or status is RunStatus.SKIPPED:
            raise ValueError(f"finish needs succeeded, failed or interrupted, got {status}")
        with self._ns.lock:
            state = self._job(job)
            run = state.runs.get(slot)
            decision = decide_finish(run, token, status)
            if decision == "write":
                assert run is not None
                state.runs[slot] = attrs.evolve(
                    run, status=status, finished_at=self.clock(), error=append_try(run.error, error)
                )
            return decision != "fenced"

    async def release(self, job: str, slot: int, token: str) -> bool:
        return self._update(job, slot, token, lambda r, now: attrs.evolve(r, lease_until=now - 1))

    async def history(self, job: str, limit: int = 100) -> list[RunRecord]:
        """Newest slot first; a run a backdoor damaged is reported (`DamagedHistory`) with the
        others, as the stores that keep data outside the process do. Writes nothing (R1)."""
        with self._ns.lock:
            state = self._ns.jobs.get((self.options.prefix, job))
            runs = state.runs if state is not None else {}
            reader = HistoryReader(job)
            where = str(self.url)
            for slot in sorted(runs, reverse=True)[:limit]:
                row = attrs.astuple(runs[slot], recurse=False)[1:]
                reader.read(
                    functools.partial(RunRecord.from_row, row, job=job, where=where),
                    key=f"slot {slot}",
                    slot=slot,
                )
            return reader.result()

    async def jobs(self) -> list[str]:
        """`SupportsJobList`: the jobs of this prefix with a remembered run or a floor."""
        with self._ns.lock:
            return self._jobs_locked()

    def _jobs_locked(self) -> list[str]:
        return sorted(
            job
            for (prefix, job), state in self._ns.jobs.items()
            if prefix == self.options.prefix and (state.runs or state.floor is not None)
        )

    # -- retries (L12) ------------------------------------------------------------------------
    async def retry(self, job: str, slot: int, token: str, error: str, delay_ms: int) -> bool:
        """`SupportsRetry` (L12): while running with `token`, append `error` to the try log and
        hold the run until ``now + delay_ms``; a resend (same token, still running) answers True
        again and appends nothing more."""
        with self._ns.lock:
            run = self._job(job).runs.get(slot)
            if run is None or run.status is not RunStatus.RUNNING or run.token != token:
                return False
            now = self.clock()
            if run.error is None or not run.error.endswith(error):
                run = attrs.evolve(run, error=append_try(run.error, error))
            self._job(job).runs[slot] = attrs.evolve(run, lease_until=now + delay_ms)
            return True

    # -- control through the store (P1, X1) ----------------------------------------------------
    async def pause(
        self, job: str, *, until_ms: int | None = None, reason: str = "", by: str = ""
    ) -> Pause:
        """`SupportsPause`: pause `job` from the store's now, replacing any pause of it."""
        check_name(job)
        reason, by = check_control_text(reason, "reason"), check_control_text(by, "by")
        if until_ms is not None and (isinstance(until_ms, bool) or not isinstance(until_ms, int)):
            raise ConfigError(f"until_ms must be epoch milliseconds or None, got {shown(until_ms)}")
        with self._ns.lock:
            pause = Pause(job=job, since_ms=self.clock(), until_ms=until_ms, reason=reason, by=by)
            self._ns.pauses[(self.options.prefix, job)] = pause
            return pause

    async def resume(self, job: str) -> bool:
        """`SupportsPause`: end the pause of `job`; False if none was in force."""
        check_name(job)
        with self._ns.lock:
            pause = self._ns.pauses.pop((self.options.prefix, job), None)
            return pause is not None and pause.active(self.clock())

    async def pauses(self) -> list[Pause]:
        """`SupportsPause`: the pauses in force, by job. Writes nothing (R1)."""
        with self._ns.lock:
            now = self.clock()
            return sorted(
                (
                    pause
                    for (prefix, _), pause in self._ns.pauses.items()
                    if prefix == self.options.prefix and pause.active(now)
                ),
                key=lambda p: p.job,
            )

    async def trigger(self, job: str, *, reason: str = "", by: str = "") -> Trigger:
        """`SupportsTrigger`: an ad-hoc slot of `job` at the store's now, off the whole second
        and unique among the job's triggers."""
        check_name(job)
        reason, by = check_control_text(reason, "reason"), check_control_text(by, "by")
        with self._ns.lock:
            now = self.clock()
            kept = [
                t
                for t in self._ns.triggers.get(self.options.prefix, [])
                if t.requested_at >= now - TRIGGERS_KEPT_MS
            ]
            taken = {t.slot for t in kept if t.job == job}
            slot = now
            while slot % 1000 == 0 or slot in taken:
                slot += 1
            trigger = Trigger(job=job, slot=slot, requested_at=now, reason=reason, by=by)
            self._ns.triggers[self.options.prefix] = [*kept, trigger]
            return trigger

    async def triggers(self, since_ms: int) -> list[Trigger]:
        """`SupportsTrigger`: the triggers written at or after `since_ms`, oldest first.
        Writes nothing (R1)."""
        with self._ns.lock:
            listed = self._ns.triggers.get(self.options.prefix, [])
            return sorted(
                (t for t in listed if t.requested_at >= since_ms),
                key=lambda t: (t.requested_at, t.slot),
            )

    # -- the fleet's member list (M1) ----------------------------------------------------------
    async def announce(
        self, instance: str, ttl_ms: int, stats: Mapping[str, int] | None = None
    ) -> Member:
        """`SupportsMembership`: heartbeat of `instance`, live until now + `ttl_ms`."""
        with self._ns.lock:
            prefix = self.options.prefix
            return self._ns.members.announce(prefix, instance, ttl_ms, stats, self.clock())

    async def members(self) -> list[Member]:
        """`SupportsMembership`: the live members of this prefix, by instance. Works on a store
        opened read-only (R1)."""
        with self._ns.lock:
            return self._ns.members.live(self.options.prefix, self.clock())

    async def leave(self, instance: str) -> bool:
        """`SupportsMembership`: remove `instance` now; False if it was not a live member."""
        with self._ns.lock:
            return self._ns.members.leave(self.options.prefix, instance, self.clock())

    # -- backdoors for the conformance kit ------------------------------------------------------
    def raw_run(self, job: str, slot: int) -> RunRecord | None:
        with self._ns.lock:
            return self._job(job).runs.get(slot)

    def force_expire(self, job: str, slot: int) -> None:
        with self._ns.lock:
            state = self._job(job)
            run = state.runs[slot]
            state.runs[slot] = attrs.evolve(run, lease_until=self.clock() - 1)

    def floor(self, job: str) -> int | None:
        with self._ns.lock:
            return self._job(job).floor

    def damage(self, job: str, at: int | None, /, **fields: object) -> None:
        """Write values anarchon never writes, unchecked, for tests of a damaged store: fields
        of the run at slot `at` (``status="bogus"``, ``slot="abc"``), or with `at` None the
        job's ``floor`` (``floor="bad"``)."""
        with self._ns.lock:
            state = self._job(job)
            if at is None:
                state.floor = fields.pop("floor")  # type: ignore[assignment]
            if fields:
                assert at is not None
                state.runs[at] = attrs.evolve(state.runs[at], **fields)  # type: ignore[arg-type]
