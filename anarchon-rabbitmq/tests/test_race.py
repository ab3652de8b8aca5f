"""C1 under real contention: 4 OS processes x 32 asyncio tasks claim the same 120 slots at once.

120 slots, not 1,000: every slot is a new durable queue, and RabbitMQ 3.10 creates only about 500
queues a second on this 2-core machine, while the four claiming processes compete with the broker
for the same two cores. 1,000 slots x 128 claimants (128,000 claims in flight) take minutes and
turn into confirm timeouts (`unknown`), without adding contention: each slot still has 128 rivals
in flight together."""

from __future__ import annotations

import asyncio
import collections
import json
import os
import pathlib
import sys
import time

import pytest

from anarchon_rabbitmq import queue_name

from .conftest import AMQP_URL, delete_queues

PROCESSES = 4
TASKS = 32
SLOTS = 120


@pytest.mark.processes
async def test_C1_one_winner_per_slot_across_processes(prefix: str) -> None:
    now = time.time_ns() // 1_000_000
    slots = [now - now % 1000 - i * 10 for i in range(SLOTS)]
    start_at = time.time() + 2.0
    worker = pathlib.Path(__file__).with_name("race_worker.py")
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(p for p in sys.path if p)}
    procs = [
        await asyncio.create_subprocess_exec(
            sys.executable,
            str(worker),
            json.dumps(
                {
                    "url": AMQP_URL,
                    "prefix": prefix,
                    "slots": slots,
                    "tasks": TASKS,
                    "start_at": start_at,
                    "name": f"proc{n}",
                }
            ),
            stdout=asyncio.subprocess.PIPE,
            stderr=asyncio.subprocess.PIPE,
            env=env,
        )
        for n in range(PROCESSES)
    ]
    try:
        outputs = await asyncio.wait_for(asyncio.gather(*(p.communicate() for p in procs)), 90)
    finally:
        for proc in procs:
            if proc.returncode is None:
                proc.kill()
                await proc.wait()
        await delete_queues(queue_name(prefix, "race", s) for s in slots)
    outcomes: dict[int, collections.Counter[str]] = collections.defaultdict(collections.Counter)
    for proc, (out, err) in zip(procs, outputs, strict=True):
        assert proc.returncode == 0, err.decode()
        for slot, _token, outcome, reason in json.loads(out):
            assert outcome in ("won", "lost"), reason
            outcomes[slot][outcome] += 1
    for slot in slots:
        counts = outcomes[slot]
        assert sum(counts.values()) == PROCESSES * TASKS
        assert counts["won"] == 1, f"C1/C4: slot {slot}: {dict(counts)}"
        assert counts["lost"] == PROCESSES * TASKS - 1, f"slot {slot}: {dict(counts)}"
