"""A clock for the scheduler tests: the real clocks, with a wall-clock jump on demand.

It subclasses the runtime's private `LocalClock`, which only anarchon-core's own tests may import;
the helpers every package's tests share are in ``anarchon-test-support``."""

from __future__ import annotations

import time

from anarchon._runtime.clock import LocalClock


class ShiftedClock(LocalClock):
    """The real clocks, with a wall-clock offset a test can change (a jump) at any time."""

    def __init__(self, offset_ms: int = 0) -> None:
        self.offset_ms = offset_ms

    def wall_ms(self) -> int:
        return time.time_ns() // 1_000_000 + self.offset_ms

    def monotonic(self) -> float:
        return time.monotonic()
