"""Deliberately broken backends: each breaks one rule, and the kit must fail exactly that rule.

They subclass the reference model, so everything else about them is right.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, ClassVar

import attrs

from anarchon import (
    Capabilities,
    Claim,
    ClaimRequest,
    ClaimStore,
    MemoryStore,
    Outcome,
    RunRecord,
    RunStatus,
)
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
        store = self.store_class.create(f"conf{self.run_id}", prefix=prefix, **options)
        await store.open()
        self._stores.append(store)
        return store

    @property
    def capabilities(self) -> Capabilities:
        return MemoryStore.create().capabilities

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
