"""A manual clock for the rule tests: lateness and retention without sleeping."""

from __future__ import annotations

__all__ = ["T0", "ManualClock"]

T0 = 1_800_000_000_000
"""The manual clock's start, epoch ms."""


class ManualClock:
    """Epoch milliseconds that move only when the test says so; pass it as a store's ``clock``."""

    def __init__(self, now: int = T0) -> None:
        self.now = now

    def __call__(self) -> int:
        return self.now

    def advance(self, ms: int) -> None:
        self.now += ms
