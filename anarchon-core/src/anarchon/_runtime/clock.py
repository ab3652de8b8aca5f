"""Clocks: the local wall and monotonic clocks, and the measured offset to the store's clock (T2).

Instances never compare clocks with each other (T1); an instance only corrects its own wall clock
by the offset to the store, measured as the midpoint of a round trip, best of several samples.
"""

from __future__ import annotations

import time
from collections.abc import Awaitable, Callable

import attrs

__all__ = ["LocalClock", "StoreClock", "SystemClock"]


class LocalClock:
    """What the runtime reads; tests inject their own to move time."""

    def wall_ms(self) -> int:
        raise NotImplementedError

    def monotonic(self) -> float:
        """Seconds on a clock that never jumps."""
        raise NotImplementedError


class SystemClock(LocalClock):
    def wall_ms(self) -> int:
        return time.time_ns() // 1_000_000

    def monotonic(self) -> float:
        return time.monotonic()


@attrs.define
class StoreClock:
    """The local wall clock corrected by the measured offset to the store's clock (T2)."""

    local: LocalClock
    read_store: Callable[[], Awaitable[int | None]]
    samples: int = 5
    offset_ms: int = 0
    """store clock - local clock, in ms; 0 for stores without a clock (T4)."""
    round_trip_ms: float | None = None
    """The round trip of the sample the offset came from (the shortest)."""
    measured_at: float | None = None

    def now_ms(self) -> int:
        """The local wall clock corrected to the store's clock."""
        return self.local.wall_ms() + self.offset_ms

    async def measure(self) -> None:
        """Take several samples; keep the one with the shortest round trip (least uncertainty)."""
        best: tuple[float, int] | None = None
        for _ in range(self.samples):
            sent_wall, sent = self.local.wall_ms(), self.local.monotonic()
            store_now = await self.read_store()
            rtt = self.local.monotonic() - sent
            if store_now is None:
                self.offset_ms, self.round_trip_ms = 0, None
                self.measured_at = self.local.monotonic()
                return
            midpoint = sent_wall + rtt * 500
            offset = round(store_now - midpoint)
            if best is None or rtt < best[0]:
                best = (rtt, offset)
        assert best is not None
        self.round_trip_ms = best[0] * 1000
        self.offset_ms = best[1]
        self.measured_at = self.local.monotonic()
