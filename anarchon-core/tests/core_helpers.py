from __future__ import annotations

import asyncio
import json
import sys
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from subprocess import PIPE, Popen

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


@contextmanager
def worker_processes(script: Path, n: int, *args: object) -> Iterator[list[Popen[str]]]:
    """Start `n` processes of the race worker `script` (each prints ``ready`` once set up, waits
    for ``go`` on stdin, then prints its result as a JSON line). They are killed if still running
    at the end, and their pipes closed, also when the test failed: else the garbage collector
    finds them open later, and their ResourceWarnings fail whatever test runs then."""
    procs = [
        Popen(
            [sys.executable, str(script), *map(str, args)],
            stdin=PIPE,
            stdout=PIPE,
            stderr=PIPE,
            text=True,
        )
        for _ in range(n)
    ]
    try:
        yield procs
    finally:
        for proc in procs:
            if proc.poll() is None:
                proc.kill()
            proc.wait()
            for stream in (proc.stdin, proc.stdout, proc.stderr):
                if stream is not None:
                    stream.close()


def wait_ready(procs: list[Popen[str]]) -> None:
    """Each worker's first line, ``ready``, or its error."""
    for proc in procs:
        assert proc.stdout is not None
        line = proc.stdout.readline()
        if line.strip() != "ready":
            raise AssertionError(f"worker did not start: {line!r} {proc.communicate()[1]}")


def go(procs: list[Popen[str]]) -> None:
    """The start signal, as close together as it can be sent."""
    for proc in procs:
        assert proc.stdin is not None
        proc.stdin.write("go\n")
        proc.stdin.flush()


def finish(proc: Popen[str], timeout: float = 240) -> dict[str, object]:
    """The worker's result (its last line, JSON), once it exited cleanly."""
    out, err = proc.communicate(timeout=timeout)
    assert proc.returncode == 0, err
    result: dict[str, object] = json.loads(out.strip().splitlines()[-1])
    return result
