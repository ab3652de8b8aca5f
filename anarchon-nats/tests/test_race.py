"""C1 under real concurrency: 4 OS processes x 32 asyncio tasks claim the same 1,000 slots; every
slot has exactly one winner, for both strategies."""

from __future__ import annotations

import asyncio
import time

import pytest

from anarchon_test_support import finish, go, race_processes, race_spec, wait_ready, winners

from .conftest import NATS_URL

PROCESSES = 4
TASKS = 32
SLOTS = 1000
STEP_MS = 100
HOUR_MS = 3_600_000


@pytest.mark.processes
@pytest.mark.parametrize("strategy", ["msg-id", "expected-seq"])
async def test_C1_one_winner_per_slot_across_processes(prefix: str, strategy: str) -> None:
    first = time.time_ns() // 1_000_000 - 150_000
    slots = [first + i * STEP_MS for i in range(SLOTS)]
    options = {"prefix": prefix, "strategy": strategy}
    spec = race_spec(NATS_URL, slots, TASKS, options=options, request={"max_late_ms": HOUR_MS})
    with race_processes(spec, PROCESSES) as procs:
        await asyncio.to_thread(wait_ready, procs)  # every store open (one stream, made at once)
        go(procs)
        results = await asyncio.to_thread(lambda: [r for p in procs for r in finish(p)])
    others = [r for r in results if r[2] not in ("won", "lost")]
    assert not others, f"claims neither won nor lost: {others[:10]}"
    won = winners(results)
    assert len(won) == SLOTS, f"C4: {SLOTS - len(won)} slots without a winner"
    doubles = {slot: tokens for slot, tokens in won.items() if len(tokens) != 1}
    assert not doubles, f"C1: slots with more than one winner: {doubles}"
