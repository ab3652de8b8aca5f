"""Worker processes for the race and restart tests.

A worker prints ``ready`` once set up, waits for ``go`` on stdin, then prints its result as the
last line of its output, in JSON.
"""

from __future__ import annotations

import json
import sys
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path
from subprocess import PIPE, Popen
from typing import Any

__all__ = ["finish", "go", "wait_ready", "worker_processes"]


@contextmanager
def worker_processes(
    script: Path | Sequence[str], n: int, *args: object
) -> Iterator[list[Popen[str]]]:
    """Start `n` processes of the worker `script` (a file, or the arguments after the Python
    executable, such as ``["-m", "anarchon_test_support.race"]``), each with `args`. They are
    killed if still running at the end, and their pipes closed, also when the test failed: else
    the garbage collector finds them open later, and their ResourceWarnings fail whatever test
    runs then."""
    command = [str(script)] if isinstance(script, Path) else list(script)
    procs = [
        Popen(
            [sys.executable, *command, *map(str, args)],
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


def finish(proc: Popen[str], timeout: float = 240) -> Any:
    """The worker's result (its last line, JSON), once it exited cleanly."""
    out, err = proc.communicate(timeout=timeout)
    assert proc.returncode == 0, err
    return json.loads(out.strip().splitlines()[-1])
