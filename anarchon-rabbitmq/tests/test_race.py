"""C1 under real contention: 4 OS processes x 32 asyncio tasks claim the same 120 slots at once.

120 slots, not 1,000: every slot is a new durable queue, and RabbitMQ 3.10 creates only about 500
queues a second on this 2-core machine, while the four claiming processes compete with the broker
for the same two cores. 1,000 slots x 128 claimants (128,000 claims in flight) take minutes and
turn into confirm timeouts (`unknown`), without adding contention: each slot still has 128 rivals
in flight together."""

from __future__ import annotations

import asyncio
import collections
import time

import pytest

from anarchon_rabbitmq import queue_name
from anarchon_test_support import finish, go, race_processes, race_spec, wait_ready

from .conftest import AMQP_URL, delete_queues

PROCESSES = 4
TASKS = 32
SLOTS = 120


@pytest.mark.processes
async def test_C1_one_winner_per_slot_across_processes(prefix: str) -> None:
    now = time.time_ns() // 1_000_000
    slots = [now - now % 1000 - i * 10 for i in range(SLOTS)]
    spec = race_spec(
        AMQP_URL,
        slots,
        TASKS,
        # Thousands of claims in flight queue up in the client: allow for it in the confirm timeout.
        options={"prefix": prefix, "confirm_timeout_ms": "60s"},
        request={"max_late_ms": 600_000, "overlap": "allow"},
        together=True,
    )
    try:
        with race_processes(spec, PROCESSES) as procs:
            await asyncio.to_thread(wait_ready, procs)
            go(procs)
            results = await asyncio.to_thread(lambda: [r for p in procs for r in finish(p, 90)])
    finally:
        await delete_queues(queue_name(prefix, "race", s) for s in slots)
    outcomes: dict[int, collections.Counter[str]] = collections.defaultdict(collections.Counter)
    for slot, _token, outcome, reason in results:
        assert outcome in ("won", "lost"), reason
        outcomes[slot][outcome] += 1
    for slot in slots:
        counts = outcomes[slot]
        assert sum(counts.values()) == PROCESSES * TASKS
        assert counts["won"] == 1, f"C1/C4: slot {slot}: {dict(counts)}"
        assert counts["lost"] == PROCESSES * TASKS - 1, f"slot {slot}: {dict(counts)}"
