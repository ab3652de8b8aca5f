"""C5: C1 holds for claims sent before their slot. A store that remembers a claim for a window
counted from when it is *written* (not from the slot) would forget a claim sent long before its
slot while the slot can still be claimed, and let a second token win it; it must refuse such a
claim with a `ConfigError` (`anarchon.backend.early_claim_error`) before writing anything.
Lease stores, and stores that remember from the slot, accept early claims and remember them.

The check claims one slot, three memories ahead, at several times before and after it, each
from another instance, waiting past the store's memory in between: never two `won`. It waits a
few seconds at most: a store that remembers longer is opened with the options of
`BackendHarness.short_memory`; without them, it must refuse the early claims, since the kit
cannot see whether it would remember them."""

from __future__ import annotations

import asyncio

import pytest

from anarchon import Claim, ConfigError, Outcome

from .._harness import BackendHarness
from .._rules import rule
from ._base import MAX_LATE_MS, HarnessSuite, within

__all__ = ["EarlyClaimTests"]

SHORT_MEMORY_MS = 1_000
"""The memory the check asks the harness for (`BackendHarness.short_memory`)."""
LONGEST_UNIT_MS = 1_200
"""Longest memory the check waits past; beyond it the claims are spread over this unit only."""
NO_MEMORY_UNIT_MS = 400
"""The unit of the claim times on a store that never forgets (lease stores)."""
AHEAD = 3
"""The slot is this many memories ahead of the first claim."""
CLAIM_AT = (0.0, 1.15, 2.3, 3.15)
"""When the claims are sent, in units after the first: each one after the previous one's memory
ran out; the last one after the slot (when the unit is the whole memory)."""


class EarlyClaimTests(HarnessSuite):
    """C5, on every store; it can never be not applicable."""

    @rule("C5")
    @pytest.mark.asyncio
    async def test_C5_early_claims_never_win_twice(self, harness: BackendHarness) -> None:
        options = harness.short_memory(SHORT_MEMORY_MS) or {}
        stores = [await self.open(harness, **options) for _ in CLAIM_AT]
        memory = stores[0].capabilities.remembers_ms
        if memory is None:
            unit, ahead, max_late = NO_MEMORY_UNIT_MS, AHEAD * NO_MEMORY_UNIT_MS, MAX_LATE_MS
        else:
            # max_late half the memory: after the slot a claim is within what the store can
            # remember (so it must be accepted), before it a windowed store must refuse.
            unit, ahead, max_late = min(memory, LONGEST_UNIT_MS), AHEAD * memory, memory // 2
        first = await self.now(stores[0])
        slot = first + ahead
        answers: list[tuple[int, Claim | ConfigError]] = []
        for n, (store, at) in enumerate(zip(stores, CLAIM_AT, strict=True)):
            delay = first + int(at * unit) - await self.now(store)
            if delay > 0:
                await asyncio.sleep(delay / 1000)
            sent = await self.now(store)
            request = self.request(
                "c5", slot, instance=f"host:{n}:0c50", lease_ms=60_000, max_late_ms=max_late
            )
            try:
                answer: Claim | ConfigError = await within(store.claim(request))
            except ConfigError as refused:
                answer = refused
                if not any(isinstance(a, Claim) and a.won for _, a in answers):
                    assert await within(harness.raw_run("c5", slot)) is None, (
                        f"C5: a claim refused as early must write nothing, yet the store holds "
                        f"a run of slot {slot} ({refused})"
                    )
            answers.append((sent - slot, answer))
        won = [(age, a) for age, a in answers if isinstance(a, Claim) and a.won]
        told = ", ".join(f"{_answer(a)} at {age:+d} ms" for age, a in answers)
        assert len(won) <= 1, (
            f"C5: {len(won)} claims of one slot sent before it were won ({told}; slot "
            f"{ahead} ms ahead of the first, max_late {max_late} ms). A store that remembers a "
            f"claim for {memory} ms from when it is written must refuse a claim it could not "
            "remember until slot + max_late (raise the ConfigError of "
            "anarchon.backend.early_claim_error before writing), or remember it from the slot"
        )
        if memory is not None and memory > LONGEST_UNIT_MS:
            accepted = [
                age for age, a in answers if isinstance(a, Claim) and -age > memory - max_late
            ]
            assert not accepted, (
                f"C5: the store accepted claims {', '.join(f'{-a} ms' for a in accepted)} before "
                f"their slot, yet says it remembers a claim for {memory} ms, longer than the kit "
                f"waits ({LONGEST_UNIT_MS} ms), so the kit cannot see whether it remembers them "
                f"until slot + max_late ({max_late} ms). A store that remembers from the write "
                "must refuse them (ConfigError, anarchon.backend.early_claim_error); one that "
                "remembers from the slot lets the kit check it: return options for a memory of "
                f"about {SHORT_MEMORY_MS} ms from BackendHarness.short_memory"
            )
        if answers[-1][0] >= 0:
            assert won, (
                f"C5/C4: once its slot came, a claim of a slot nobody won must be won ({told})"
            )
            last = answers[-1][1]
            assert isinstance(last, Claim) and last.outcome is not Outcome.LATE, (
                f"C5: the claim after the slot is within max_late ({max_late} ms): {told}"
            )


def _answer(answer: Claim | ConfigError) -> str:
    return "refused" if isinstance(answer, ConfigError) else str(answer.outcome)
