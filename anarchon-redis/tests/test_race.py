"""C1 under load, per strategy: 4 OS processes x 32 asyncio tasks claim the same 1,000 slots
(each task in slot order, as a scheduler does); exactly one winner per slot, none late.

The script strategy scans every claim of the window, so 1,000 slots of one job in one window is
its worst case (a claim costs about a millisecond of server time): it races with 8 tasks per
process, which keeps the run under a minute."""

from __future__ import annotations

import asyncio
from typing import TYPE_CHECKING

import pytest

from anarchon_test_support import finish, go, race_processes, race_spec, wait_ready

if TYPE_CHECKING:
    from conftest import EnvFactory

PROCESSES, TASKS, SLOTS = 4, 32, 1000


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
    spec = race_spec(
        env.url,
        slots,
        8 if strategy == "script" else TASKS,
        options={"strategy": strategy, "prefix": env.prefix},
        # max_late within every window (C5 refuses claims beyond it)
        request={"max_late_ms": 120_000, "overlap": "allow"},
    )
    with race_processes(spec, PROCESSES) as procs:
        await asyncio.to_thread(wait_ready, procs)
        go(procs)
        results = await asyncio.to_thread(lambda: [r for p in procs for r in finish(p)])
    winners: dict[int, list[str]] = {slot: [] for slot in slots}
    for slot, token, outcome, _reason in results:
        assert outcome in ("won", "lost", "running"), f"slot {slot} was {outcome} for a claimant"
        if outcome == "won":
            winners[slot].append(token)
    for slot in slots:
        assert len(winners[slot]) == 1, f"C1: slot {slot} had {len(winners[slot])} winners"
