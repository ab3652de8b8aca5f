from __future__ import annotations

import asyncio
import time
from collections.abc import Callable

import pytest

from anarchon._clock import LocalClock


async def eventually(condition: Callable[[], bool], timeout: float = 10.0, what: str = "") -> None:
    """Wait until `condition()` holds, failing after `timeout` seconds (no blind sleeps)."""
    deadline = time.monotonic() + timeout
    while not condition():
        if time.monotonic() > deadline:
            pytest.fail(f"timed out after {timeout} s waiting for {what or condition}")
        await asyncio.sleep(0.005)


class ShiftedClock(LocalClock):
    """The real clocks, with a wall-clock offset a test can change (a jump) at any time."""

    def __init__(self, offset_ms: int = 0) -> None:
        self.offset_ms = offset_ms

    def wall_ms(self) -> int:
        return time.time_ns() // 1_000_000 + self.offset_ms

    def monotonic(self) -> float:
        return time.monotonic()
