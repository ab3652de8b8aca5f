"""Contention: 2, 8 and 32 claimers (tasks, each with its own store, as separate instances would
be) and 4 processes claim the same runs one after another; claims per second, and a check that
every run had exactly one winner."""

from __future__ import annotations

import asyncio
import time
from typing import Any

from ._proc import _requests, claim_runs, run_instances
from ._targets import Target, wall_ms

__all__ = ["measure_contention"]


def _runs(prefix_jobs: str, jobs: int, slots: int) -> list[tuple[str, int]]:
    base = wall_ms() - 2_000
    return [(f"{prefix_jobs}{j}", base + k) for k in range(slots) for j in range(jobs)]


def _check(wins: list[list[int]], runs: int) -> dict[str, Any]:
    counts = [0] * runs
    for won in wins:
        for i in won:
            counts[i] += 1
    return {
        "runs": runs,
        "exactly_one_winner": all(c == 1 for c in counts),
        "runs_without_winner": sum(c == 0 for c in counts),
        "runs_with_two_winners": sum(c > 1 for c in counts),
    }


async def _tasks(target: Target, claimers: int, slots: int) -> dict[str, Any]:
    prefix = target.prefix(f"c{claimers}")
    runs = _runs("c", 10, slots)
    stores = [target.new_store(prefix) for _ in range(claimers)]
    await asyncio.gather(*(s.open() for s in stores))
    try:
        requests = [_requests(runs, f"bench:t{i}") for i in range(claimers)]
        started = time.perf_counter()
        wins = await asyncio.gather(
            *(claim_runs(s, r, batch=False) for s, r in zip(stores, requests, strict=True))
        )
        elapsed = time.perf_counter() - started
    finally:
        await asyncio.gather(*(s.close() for s in stores))
    won = [[i for i, w in enumerate(ws) if w] for ws in wins]
    claims = claimers * len(runs)
    return {
        "claimers": claimers,
        "kind": "tasks",
        "claims": claims,
        "seconds": elapsed,
        "claims_per_s": claims / elapsed,
        **_check(won, len(runs)),
    }


async def _processes(target: Target, processes: int, slots: int) -> dict[str, Any]:
    prefix = target.prefix(f"p{processes}")
    runs = _runs("p", 10, slots)
    reports = await asyncio.to_thread(run_instances, target.url(prefix), runs, processes, False)
    elapsed = max(r["ended"] for r in reports) - min(r["started"] for r in reports)
    claims = processes * len(runs)
    return {
        "claimers": processes,
        "kind": "processes",
        "claims": claims,
        "seconds": elapsed,
        "claims_per_s": claims / elapsed,
        **_check([r["won"] for r in reports], len(runs)),
    }


async def measure_contention(
    target: Target, slots: int, claimers: tuple[int, ...] = (2, 8, 32), processes: int = 4
) -> dict[str, Any]:
    """`slots` slots of 10 jobs each, claimed by every claimer in the same order."""
    rows = [await _tasks(target, n, slots) for n in claimers]
    rows.append(await _processes(target, processes, slots))
    return {
        "target": target.name,
        "runs": slots * 10,
        "rows": rows,
        "met": all(r["exactly_one_winner"] for r in rows),
    }
