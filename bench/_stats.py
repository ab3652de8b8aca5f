"""Medians, p99s and ratios of interleaved samples."""

from __future__ import annotations

import statistics
from collections.abc import Sequence

__all__ = ["Summary", "median", "p99", "ratio", "spread", "summarize"]


def median(samples: Sequence[float]) -> float:
    return float(statistics.median(samples)) if samples else float("nan")


def p99(samples: Sequence[float]) -> float:
    """The nearest-rank 99th percentile (the largest sample below the top 1 %)."""
    if not samples:
        return float("nan")
    ordered = sorted(samples)
    return float(ordered[max(int(len(ordered) * 0.99) - 1, 0)])


def ratio(top: float, bottom: float) -> float:
    return top / bottom if bottom > 0 else float("nan")


def spread(values: Sequence[float]) -> tuple[float, float]:
    """(min, max) of per-round values, the noise between rounds."""
    return (min(values), max(values)) if values else (float("nan"), float("nan"))


Summary = dict[str, float]


def summarize(samples: Sequence[float]) -> Summary:
    """Median and p99 of latencies in seconds, reported in microseconds."""
    return {"n": len(samples), "median_us": median(samples) * 1e6, "p99_us": p99(samples) * 1e6}
