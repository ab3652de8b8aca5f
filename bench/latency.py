"""Sequential claim latency, won and lost, as a ratio to the store's floor in the same run.

The floor, a won claim and a lost claim are timed interleaved, one of each per iteration (their
order rotating), through the same store and connection, so load from elsewhere on the machine
falls on all three alike. The iterations are split into rounds; each round gives its own ratio of
medians, and the spread of those ratios is reported next to the ratio over all samples.
"""

from __future__ import annotations

import time
from collections.abc import Awaitable, Callable
from typing import Any

from ._stats import median, p99, ratio, spread, summarize
from ._targets import Target

__all__ = ["measure_latency"]

WARMUP = 50


async def _timed(call: Callable[[], Awaitable[None]]) -> float:
    started = time.perf_counter()
    await call()
    return time.perf_counter() - started


async def measure_latency(target: Target, n: int, rounds: int) -> dict[str, Any]:
    """`n` calls of each kind (floor, won, lost) in `rounds` rounds, after a warm-up."""
    kinds = ("floor", "won", "lost")
    samples: dict[str, list[list[float]]] = {k: [] for k in kinds}
    per_round = max(n // rounds, 1)
    for r in range(-1, rounds):
        count = WARMUP if r < 0 else per_round
        current: dict[str, list[float]] = {k: [] for k in kinds}
        for i in range(count):
            won = target.win_request()  # built (and its slot prepared) before the clock starts
            await target.ready(won)
            calls: dict[str, Callable[[], Awaitable[None]]] = {
                "floor": target.floor,
                "won": lambda won=won: target.win(won),  # type: ignore[misc]
                "lost": target.lose,
            }
            shift = i % 3
            for kind in kinds[shift:] + kinds[:shift]:
                current[kind].append(await _timed(calls[kind]))
        if r >= 0:
            for kind in kinds:
                samples[kind].append(current[kind])
    flat = {k: [x for chunk in samples[k] for x in chunk] for k in kinds}
    result: dict[str, Any] = {
        "target": target.name,
        "backend": target.backend,
        "floor_op": target.floor_name,
        "calls_per_kind": len(flat["floor"]),
        "rounds": rounds,
        "floor": summarize(flat["floor"]),
        "ratio_target": target.latency_target,
    }
    for kind in ("won", "lost"):
        per_round_ratios = [
            ratio(median(samples[kind][r]), median(samples["floor"][r])) for r in range(rounds)
        ]
        low, high = spread(per_round_ratios)
        result[kind] = {
            **summarize(flat[kind]),
            "median_ratio": ratio(median(flat[kind]), median(flat["floor"])),
            "p99_ratio": ratio(p99(flat[kind]), p99(flat["floor"])),
            "round_ratio_min": low,
            "round_ratio_max": high,
        }
        result[kind]["met"] = result[kind]["median_ratio"] <= target.latency_target
    result["lost_in_target"] = target.lost_in_target
    result["met"] = result["won"]["met"] and (result["lost"]["met"] or not target.lost_in_target)
    return result
