"""Waiting for a condition with a deadline: tests never sleep blindly."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable

import pytest

__all__ = ["eventually"]


async def eventually(condition: Callable[[], bool], timeout: float = 10.0, what: str = "") -> None:
    """Wait until `condition()` holds, failing after `timeout` seconds (no blind sleeps)."""
    deadline = time.monotonic() + timeout
    while not condition():
        if time.monotonic() > deadline:
            pytest.fail(f"timed out after {timeout} s waiting for {what or condition}")
        await asyncio.sleep(0.005)
