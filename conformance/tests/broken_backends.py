"""Deliberately broken backends: each breaks one rule, and the kit must fail exactly that rule.

They subclass the reference model, so everything else about them is right.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any, ClassVar

import attrs

from anarchon import (
    Capabilities,
    Claim,
    ClaimRequest,
    ClaimStore,
    Member,
    MemoryStore,
    Outcome,
    RunRecord,
    RunStatus,
    StoreNotSetUp,
    Trigger,
)
from anarchon.backend import check_announce, early_claim_error, joined_at
from anarchon_conformance import DEFAULT_PREFIX, BackendHarness


class AlwaysWins(MemoryStore):
    """Breaks C1: answers `won` to everyone."""

    async def claim(self, request: ClaimRequest) -> Claim:
        answer = await super().claim(request)
        return attrs.evolve(answer, outcome=Outcome.WON, attempt=max(answer.attempt, 1))


class ForgetsToken(MemoryStore):
    """Breaks C2: a resent claim is not recognised as the caller's own."""

    async def claim(self, request: ClaimRequest) -> Claim:
        run = self.raw_run(request.job, request.slot)
        if run is not None and run.status is RunStatus.RUNNING and run.token == request.token:
            return Claim(outcome=Outcome.RUNNING, attempt=run.attempt, holder=run.holder)
        return await super().claim(request)


class RenewsAnyToken(MemoryStore):
    """Breaks L7: renew does not compare tokens, so a fenced runner keeps its lease."""

    async def renew(self, job: str, slot: int, token: str, lease_ms: int) -> bool:
        run = self.raw_run(job, slot)
        if run is None or run.status is not RunStatus.RUNNING:
            return False
        return await super().renew(job, slot, run.token, lease_ms)


class ForgetsEarly(MemoryStore):
    """Breaks T3: deletes runs beyond `history_limit` at once, with no floor."""

    def _sweep(self, state: Any, now: int) -> None:
        while len(state.runs) > self.options.history_limit:
            oldest = min(state.runs)
            del state.runs[oldest]
            state.keep.pop(oldest, None)


class IgnoresMaxLate(MemoryStore):
    """Breaks L1: claims slots however old they are."""

    async def claim(self, request: ClaimRequest) -> Claim:
        return await super().claim(attrs.evolve(request, max_late_ms=10**12))


class PreparesByClaiming(MemoryStore):
    """Breaks PREP: its preparation claims each run for the preparing instance."""

    prepare_ahead_ms = 1_000

    async def prepare(self, jobs: Sequence[str], slot: int) -> None:
        for job in jobs:
            await super().claim(
                ClaimRequest(job=job, slot=slot, instance="preparer:1:0000", max_late_ms=10**9)
            )


class SetsUpByClaiming(MemoryStore):
    """Breaks SETUP: setting a job up claims its current slot for the setting instance."""

    async def setup_jobs(self, jobs: Sequence[str]) -> None:
        now = await self.now_ms()
        for job in jobs:
            await super().claim(
                ClaimRequest(job=job, slot=now - now % 1000, instance="setter:1:0000")
            )


class WritesNoSkipRecord(MemoryStore):
    """Breaks S1: answers a skip (late, overlap, skip_reason) as it decides it but writes no
    record, as overlap did before the ledger, so a later claim of the slot can win it."""

    def _claim_locked(self, request: ClaimRequest, now: int) -> Claim:
        state = self._job(request.job)
        had_run = request.slot in state.runs
        claim = super()._claim_locked(request, now)
        if claim.outcome is Outcome.SKIPPED and not had_run:
            del state.runs[request.slot]
            state.keep.pop(request.slot, None)
        return claim


class WindowedMemory(MemoryStore):
    """Opened with ``forget_after_ms`` (the harness's `short_memory`), it remembers a claim for
    that long from when it was *written*, like a store whose idempotency window counts from the
    write (Redis ``script``, NATS ``msg-id``), and says so in `remembers_ms`."""

    window_ms: int | None = None

    @property
    def capabilities(self) -> Capabilities:
        caps = super().capabilities
        if self.window_ms is None:
            return caps
        return attrs.evolve(caps, remembers_ms=self.window_ms)

    def _claim_locked(self, request: ClaimRequest, now: int) -> Claim:
        if self.window_ms is not None:
            state = self._job(request.job)
            for slot, run in list(state.runs.items()):
                if (run.claimed_at or 0) + self.window_ms < now:
                    del state.runs[slot]
                    state.keep.pop(slot, None)
        return super()._claim_locked(request, now)


class AcceptsEarlyClaims(WindowedMemory):
    """Breaks C5: a write-time window, and claims of any slot ahead are accepted."""


class RefusesEarlyClaims(WindowedMemory):
    """Keeps C5 with a write-time window: refuses a claim it could not remember until
    ``slot + max_late`` (the shared `early_claim_error`). Must be certified."""

    async def claim(self, request: ClaimRequest) -> Claim:
        if self.window_ms is not None:
            error = early_claim_error(request, self.clock(), self.window_ms)
            if error is not None:
                raise error
        return await super().claim(request)


class FinishNotIdempotent(MemoryStore):
    """Breaks L8 (C2 for finish): a finish resent after the run finished is False, as if the
    runner had been fenced."""

    async def finish(
        self, job: str, slot: int, token: str, status: RunStatus, error: str | None = None
    ) -> bool:
        return self._update(
            job,
            slot,
            token,
            lambda r, now: attrs.evolve(r, status=status, finished_at=now, error=error),
        )


class SetsUpWhenReadOnly(MemoryStore):
    """Breaks R1: opening read-only sets the store up before it looks, as a backend that runs
    its ``CREATE ... IF NOT EXISTS`` first would. The first read-only open still says
    "not set up"; the second finds what the first created."""

    async def open_read_only(self) -> None:
        with self._ns.lock:
            was_set_up = self.options.prefix in self._ns.opened
        await self.open()
        if not was_set_up:
            raise StoreNotSetUp(f"nothing under prefix {self.options.prefix!r} yet")


class IgnoresPause(MemoryStore):
    """Breaks P1: says pause=True and keeps pauses, but its claim never reads them, as a backend
    that checks the pause outside the claim's atomic step (or not at all) would."""

    def _claim_locked(self, request: ClaimRequest, now: int) -> Claim:
        key = (self.options.prefix, request.job)
        pause = self._ns.pauses.pop(key, None)
        try:
            return super()._claim_locked(request, now)
        finally:
            if pause is not None:
                self._ns.pauses[key] = pause


class WrongTriggerSlot(MemoryStore):
    """A trigger that writes `ad_hoc_slot(trigger)` as its slot instead of the one it chose."""

    def ad_hoc_slot(self, trigger: Trigger) -> int:
        return trigger.slot

    async def trigger(self, job: str, *, reason: str = "", by: str = "") -> Trigger:
        chosen = await super().trigger(job, reason=reason, by=by)
        wrong = attrs.evolve(chosen, slot=self.ad_hoc_slot(chosen))
        with self._ns.lock:
            listed = self._ns.triggers[self.options.prefix]
            listed[listed.index(chosen)] = wrong
        return wrong


class TriggersOnTheSecond(WrongTriggerSlot):
    """Breaks X1: a trigger's slot is the current whole second, a scheduled slot."""

    def ad_hoc_slot(self, trigger: Trigger) -> int:
        return trigger.requested_at - trigger.requested_at % 1000


class TriggersShareSlots(WrongTriggerSlot):
    """Breaks X1: a trigger's slot is one ms past its second, the same for every trigger of the
    job written in that second (off the whole second, but not unique)."""

    def ad_hoc_slot(self, trigger: Trigger) -> int:
        return trigger.requested_at - trigger.requested_at % 1000 + 1


class IgnoresRetryDelay(MemoryStore):
    """Breaks L12: a retry logs the try but leaves the lease as it was, so the run is not taken
    over when its wait ends (or is taken over at once, had its lease run out)."""

    async def retry(self, job: str, slot: int, token: str, error: str, delay_ms: int) -> bool:
        with self._ns.lock:
            run = self._job(job).runs.get(slot)
            lease_until = None if run is None else run.lease_until
        kept = await super().retry(job, slot, token, error, delay_ms)
        if kept:
            with self._ns.lock:
                state = self._job(job)
                state.runs[slot] = attrs.evolve(state.runs[slot], lease_until=lease_until)
        return kept


class LosesTryLog(MemoryStore):
    """Breaks L12: `finish` writes its own error over the try log, as a backend that kept the
    finish of L8 unchanged would."""

    async def finish(
        self, job: str, slot: int, token: str, status: RunStatus, error: str | None = None
    ) -> bool:
        with self._ns.lock:
            run = self._job(job).runs.get(slot)
            if run is not None and run.status is RunStatus.RUNNING and run.token == token:
                self._job(job).runs[slot] = attrs.evolve(run, error=None)
        return await super().finish(job, slot, token, status, error)


_members: dict[tuple[int, str], dict[str, Member]] = {}
"""(id of the memory namespace, prefix) -> its members, for `KeepsMembers`."""


class KeepsMembers(MemoryStore):
    """The reference model with its own member list (M1), kept right, for the broken one below:
    it does not depend on how `MemoryStore` keeps members, if it does."""

    @property
    def capabilities(self) -> Capabilities:
        return attrs.evolve(super().capabilities, membership=True)

    def _fleet(self) -> dict[str, Member]:
        return _members.setdefault((id(self._ns), self.options.prefix), {})

    async def announce(
        self, instance: str, ttl_ms: int, stats: Mapping[str, int] | None = None
    ) -> Member:
        instance, ttl_ms, counters = check_announce(instance, ttl_ms, stats)
        with self._ns.lock:
            now, fleet = self.clock(), self._fleet()
            old = fleet.get(instance)
            started = joined_at(old and old.started_ms, old and old.until_ms, now)
            fleet[instance] = member = Member(
                instance=instance,
                seen_ms=now,
                until_ms=now + ttl_ms,
                started_ms=started,
                stats=counters,
            )
        return member

    def live(self, member: Member, now: int) -> bool:
        return member.until_ms >= now

    async def members(self) -> list[Member]:
        with self._ns.lock:
            now = self.clock()
            return sorted(
                (m for m in self._fleet().values() if self.live(m, now)),
                key=lambda m: m.instance,
            )

    async def leave(self, instance: str) -> bool:
        with self._ns.lock:
            gone = self._fleet().pop(instance, None)
            return gone is not None and gone.until_ms >= self.clock()


class ListsExpiredMembers(KeepsMembers):
    """Breaks M1: members() lists members whose ttl ran out."""

    def live(self, member: Member, now: int) -> bool:
        return True


class BrokenHarness(BackendHarness):
    """The memory harness, opening `store_class` instead of `MemoryStore`."""

    store_class: ClassVar[type[MemoryStore]] = MemoryStore

    @property
    def backend_name(self) -> str:
        return self.store_class.__name__

    def url(self, address: tuple[str, int] | None = None) -> str:
        return f"memory://conf{self.run_id}"

    def process_url(self) -> str | None:
        return None

    async def open_store(
        self,
        *,
        prefix: str = DEFAULT_PREFIX,
        address: tuple[str, int] | None = None,
        **options: Any,
    ) -> ClaimStore:
        window = options.pop("forget_after_ms", None)
        read_only = options.pop("read_only", False)
        store = self.store_class.create(f"conf{self.run_id}", prefix=prefix, **options)
        if window is not None:
            assert isinstance(store, WindowedMemory)
            store.window_ms = window
        if read_only:
            await store.open_read_only()
        else:
            await store.open()
        self._stores.append(store)
        return store

    @property
    def capabilities(self) -> Capabilities:
        return MemoryStore.create().capabilities

    shortest_memory_ms: ClassVar[int] = 0
    """The shortest memory a `WindowedMemory` store can be given (as if the store had a lower
    bound on its window)."""

    def short_memory(self, remembers_ms: int) -> dict[str, Any] | None:
        if issubclass(self.store_class, WindowedMemory):
            return {"forget_after_ms": max(remembers_ms, self.shortest_memory_ms)}
        return None

    def backdoor(self, prefix: str) -> MemoryStore:
        return MemoryStore.create(f"conf{self.run_id}", prefix=prefix)

    async def force_expire(self, job: str, slot: int, *, prefix: str = DEFAULT_PREFIX) -> None:
        self.backdoor(prefix).force_expire(job, slot)

    async def raw_run(
        self, job: str, slot: int, *, prefix: str = DEFAULT_PREFIX
    ) -> RunRecord | None:
        return self.backdoor(prefix).raw_run(job, slot)


class Control(BrokenHarness):
    """Not broken at all: proves the failures below come from the mutations."""


class AlwaysWinsHarness(BrokenHarness):
    store_class = AlwaysWins


class ForgetsTokenHarness(BrokenHarness):
    store_class = ForgetsToken


class RenewsAnyTokenHarness(BrokenHarness):
    store_class = RenewsAnyToken


class ForgetsEarlyHarness(BrokenHarness):
    store_class = ForgetsEarly


class IgnoresMaxLateHarness(BrokenHarness):
    store_class = IgnoresMaxLate


class PreparesByClaimingHarness(BrokenHarness):
    store_class = PreparesByClaiming


class SetsUpByClaimingHarness(BrokenHarness):
    store_class = SetsUpByClaiming


class WritesNoSkipRecordHarness(BrokenHarness):
    store_class = WritesNoSkipRecord


class AcceptsEarlyClaimsHarness(BrokenHarness):
    store_class = AcceptsEarlyClaims


class AcceptsEarlyClaimsLongHarness(BrokenHarness):
    """Breaks C5 with a window longer than the kit waits: the kit cannot see it forget, so it
    must not take the early claims it accepted on trust."""

    store_class = AcceptsEarlyClaims
    shortest_memory_ms = 30_000


class RefusesEarlyClaimsHarness(BrokenHarness):
    """Not broken: a write-time window that refuses early claims passes C5."""

    store_class = RefusesEarlyClaims


class FinishNotIdempotentHarness(BrokenHarness):
    store_class = FinishNotIdempotent


class SetsUpWhenReadOnlyHarness(BrokenHarness):
    store_class = SetsUpWhenReadOnly


class IgnoresPauseHarness(BrokenHarness):
    store_class = IgnoresPause


class TriggersOnTheSecondHarness(BrokenHarness):
    store_class = TriggersOnTheSecond


class TriggersShareSlotsHarness(BrokenHarness):
    store_class = TriggersShareSlots


class IgnoresRetryDelayHarness(BrokenHarness):
    store_class = IgnoresRetryDelay


class LosesTryLogHarness(BrokenHarness):
    store_class = LosesTryLog


class KeepsMembersHarness(BrokenHarness):
    """Not broken: the member list of `KeepsMembers` passes M1."""

    store_class: ClassVar[type[MemoryStore]] = KeepsMembers

    @property
    def capabilities(self) -> Capabilities:
        return attrs.evolve(super().capabilities, membership=True)


class ListsExpiredMembersHarness(KeepsMembersHarness):
    store_class = ListsExpiredMembers
