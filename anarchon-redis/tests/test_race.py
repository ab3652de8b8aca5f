"""C1 under load, per strategy: 4 OS processes x 32 asyncio tasks claim the same 1,000 slots
(each task in slot order, as a scheduler does); exactly one winner per slot, none late.

The script strategy scans every claim of the window, so 1,000 slots of one job in one window is
its worst case (a claim costs about a millisecond of server time): it races with 8 tasks per
process, which keeps the run under a minute."""

from __future__ import annotations

import asyncio
import collections
import json
import os
import sys
import time
from pathlib import Path
from typing import TYPE_CHECKING

import pytest

if TYPE_CHECKING:
    from conftest import EnvFactory

PROCESSES, TASKS, SLOTS = 4, 32, 1000
WORKER = Path(__file__).with_name("race_worker.py")


@pytest.mark.processes
@pytest.mark.parametrize(
    ("server", "strategy"),
    [
        pytest.param("redis", "lease", id="redis-lease"),
        pytest.param("redis", "stream-id", id="redis-stream-id"),
        pytest.param("redis", "script", id="redis-script"),
        pytest.param("redis86", "idmp", id="redis86-idmp"),
    ],
)
async def test_C1_race_processes_and_tasks(env_on: EnvFactory, server: str, strategy: str) -> None:
    env = await env_on(server)
    now = await env.now()
    slots = [now - 30_000 + n for n in range(SLOTS)]  # all within max_late (2 min) and every window
    spec = {
        "url": env.url,
        "strategy": strategy,
        "prefix": env.prefix,
        "job": "race",
        "slots": slots,
        "tasks": 8 if strategy == "script" else TASKS,
        "start_at": time.time() + 2.0,
    }
    pythonpath = os.pathsep.join(p for p in sys.path if p)
    procs = [
        await asyncio.create_subprocess_exec(
            sys.executable,
            str(WORKER),
            json.dumps({**spec, "instance": f"proc{n}"}),
            stdout=asyncio.subprocess.PIPE,
            stderr=asyncio.subprocess.PIPE,
            env={**os.environ, "PYTHONPATH": pythonpath},
        )
        for n in range(PROCESSES)
    ]
    outputs = await asyncio.wait_for(asyncio.gather(*(p.communicate() for p in procs)), 240)
    winners: dict[int, list[str]] = collections.defaultdict(list)
    for proc, (out, err) in zip(procs, outputs, strict=True):
        assert proc.returncode == 0, err.decode()
        for slot, token, outcome in json.loads(out):
            assert outcome == "won", f"slot {slot} was {outcome} for one claimant"
            winners[slot].append(token)
    for slot in slots:
        assert len(winners[slot]) == 1, f"C1: slot {slot} had {len(winners[slot])} winners"
