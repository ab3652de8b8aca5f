"""T3: the store really remembers a run as long as `capabilities.remembers_ms` says, and a run it
forgot can never be won again (the L11 floor)."""

from __future__ import annotations

import asyncio

import pytest

from anarchon import Outcome, RunStatus

from .._harness import BackendHarness
from .._rules import rule
from ._base import HarnessSuite, memory_max_late_ms, within

__all__ = ["MemoryRuleTests"]

BUDGET_MS = 3_000
"""Longest the kit waits for a finite memory window; beyond it, it samples at this age."""


class MemoryRuleTests(HarnessSuite):
    """T3, with short leases and retention so that forgetting happens within the test."""

    @rule("T3")
    @pytest.mark.asyncio
    async def test_T3_run_remembered_for_remembers_ms(self, harness: BackendHarness) -> None:
        caps = harness.capabilities
        max_late = 300
        store = await self.open(harness, history_limit=1, retention_margin_ms=1)
        now = await self.now(store)
        slot = now - 50
        request = self.request("t3", slot, lease_ms=100, max_late_ms=max_late, attempts=1)
        await self.win(store, request)
        if caps.leases:
            assert await within(store.finish("t3", slot, request.token, RunStatus.SUCCEEDED))  # type: ignore[attr-defined]
        horizon = caps.remembers_ms if caps.remembers_ms is not None else 1_000
        asking = memory_max_late_ms(caps)
        ages = sorted({50, min(horizon, BUDGET_MS) - 100})
        for age in ages:
            delay = slot + age - await self.now(store)
            if delay > 0:
                await asyncio.sleep(delay / 1000)
            # Another run of the job, so a store that cleans up on writes does so now.
            await within(
                store.claim(
                    self.request(
                        "t3",
                        await self.now(store) - 10,
                        lease_ms=100,
                        max_late_ms=max_late,
                        attempts=1,
                    )
                )
            )
            again = await within(
                store.claim(self.request("t3", slot, lease_ms=100, max_late_ms=asking))
            )
            assert not again.won, (
                f"T3: {age} ms after its slot the store forgot a run it must remember "
                f"(remembers_ms={caps.remembers_ms}) and let another token win it: {again}"
            )
            assert again.outcome in (Outcome.DONE, Outcome.LATE, Outcome.LOST, Outcome.UNKNOWN), (
                again
            )

    @rule("T3", "L11")
    @pytest.mark.asyncio
    async def test_T3_forgotten_run_is_never_won_again(self, harness: BackendHarness) -> None:
        if harness.capabilities.remembers_ms is not None:
            pytest.skip(
                "not applicable: capability remembers_ms is finite (the store forgets runs; "
                "slots older than the window are judged late by the instance, T4)"
            )
        max_late = 200
        store = await self.open(harness, history_limit=1, retention_margin_ms=1)
        now = await self.now(store)
        old = self.request("t3f", now - 50, lease_ms=100, max_late_ms=max_late, attempts=1)
        await self.win(store, old)
        if harness.capabilities.leases:
            assert await within(store.finish("t3f", old.slot, old.token, RunStatus.SUCCEEDED))  # type: ignore[attr-defined]
        await asyncio.sleep(0.5)  # past slot + max_late + attempts * lease: may be deleted now
        for n in range(3):
            newer = self.request(
                "t3f",
                await self.now(store) - 10 + n,
                lease_ms=100,
                max_late_ms=2_000,  # only newer runs, which the old one is forgotten behind
                attempts=1,
            )
            await self.win(store, newer)
        again = await within(
            store.claim(
                self.request("t3f", old.slot, lease_ms=100, max_late_ms=3_600_000, attempts=1)
            )
        )
        assert again.outcome in (Outcome.LATE, Outcome.DONE), (
            f"T3/L11: a run the store may have forgotten must never be won again, got {again}"
        )
