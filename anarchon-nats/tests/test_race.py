"""C1 under real concurrency: 4 OS processes x 32 asyncio tasks claim the same 1,000 slots; every
slot has exactly one winner, for both strategies."""

from __future__ import annotations

import asyncio
import collections
import json
import sys
import time
from pathlib import Path

import pytest

from .conftest import NATS_URL

PROCESSES = 4
TASKS = 32
SLOTS = 1000
WORKER = Path(__file__).with_name("race_worker.py")


@pytest.mark.parametrize("strategy", ["msg-id", "expected-seq"])
async def test_C1_one_winner_per_slot_across_processes(prefix: str, strategy: str) -> None:
    first = time.time_ns() // 1_000_000 - 150_000
    procs = [
        await asyncio.create_subprocess_exec(
            sys.executable,
            str(WORKER),
            NATS_URL,
            prefix,
            strategy,
            "race",
            str(first),
            str(SLOTS),
            str(TASKS),
            stdin=asyncio.subprocess.PIPE,
            stdout=asyncio.subprocess.PIPE,
            stderr=asyncio.subprocess.PIPE,
        )
        for _ in range(PROCESSES)
    ]
    try:
        for proc in procs:  # every store open (the stream created once, concurrently)
            assert proc.stdout is not None
            line = await asyncio.wait_for(proc.stdout.readline(), 30)
            assert line.strip() == b"ready", line
        for proc in procs:
            assert proc.stdin is not None
            proc.stdin.write(b"go\n")
            await proc.stdin.drain()
        outputs = await asyncio.wait_for(asyncio.gather(*(p.communicate() for p in procs)), 240)
    finally:
        for proc in procs:
            if proc.returncode is None:
                proc.kill()
                await proc.wait()
    winners: dict[int, list[str]] = collections.defaultdict(list)
    for proc, (out, err) in zip(procs, outputs, strict=True):
        assert proc.returncode == 0, err.decode()
        for slot, token in json.loads(out):
            winners[slot].append(token)
    assert len(winners) == SLOTS, f"C4: {SLOTS - len(winners)} slots without a winner"
    doubles = {slot: tokens for slot, tokens in winners.items() if len(tokens) != 1}
    assert not doubles, f"C1: slots with more than one winner: {doubles}"
