"""A process using sync `anarchon.once`, for test_sync_once.py. Its result is its last line, JSON.

once_worker.py race URL JOB SLOT JOURNAL   ready, wait for go, one `with once(...)` block
once_worker.py reuse URL JOB N              N sync blocks on N slots, one after another
once_worker.py async URL JOB N              N `asyncio.run(...)` blocks (a connection each)
once_worker.py fork URL JOB                 a block, fork, a block in the child, one here
"""

from __future__ import annotations

import asyncio
import json
import os
import sys
import time

import anarchon


def now_ms() -> int:
    return time.time_ns() // 1_000_000


def race(url: str, job: str, slot: int, journal: str) -> dict[str, object]:
    print("ready", flush=True)
    assert sys.stdin.readline().strip() == "go"
    with anarchon.once(url, job, slot=slot) as run:
        if run is not None:
            with open(journal, "a") as f:
                f.write(f"{os.getpid()} {run.slot} {run.attempt}\n")
            time.sleep(0.3)  # the others claim while this body runs
    return {"won": run is not None, "pid": os.getpid()}


def reuse(url: str, job: str, n: int) -> dict[str, object]:
    base = now_ms() - 1000
    won = 0
    for i in range(n):
        with anarchon.once(url, job, slot=base + i) as run:
            won += run is not None
    return {"won": won}


def async_uses(url: str, job: str, n: int) -> dict[str, object]:
    base = now_ms() - 1000

    async def one(slot: int) -> bool:
        async with anarchon.once(url, job, slot=slot) as run:
            return run is not None

    return {"won": sum(asyncio.run(one(base + i)) for i in range(n))}


def fork(url: str, job: str) -> dict[str, object]:
    base = now_ms() - 1000

    @anarchon.once(url, job, slot=base)
    def parent_before() -> str:
        return "parent-before"

    first = parent_before()
    pid = os.fork()
    if pid == 0:  # the child: its own loop thread and connection, a slot of its own
        code = 1
        try:
            with anarchon.once(url, job, slot=base + 1) as run:
                code = 0 if run is not None and run.slot == base + 1 else 2
        finally:
            os._exit(code)
    _, status = os.waitpid(pid, 0)
    with anarchon.once(url, job, slot=base + 2) as run:
        after = run is not None
    history = asyncio.run(_history(url, job))
    return {
        "first": first,
        "child_exit": os.waitstatus_to_exitcode(status),
        "parent_after": after,
        "history": history,
    }


def heartbeat(url: str, job: str) -> dict[str, object]:
    with anarchon.once(url, job, every="1m", lease="1s") as run:
        assert run is not None
        deadline = time.monotonic() + 3  # three leases: only renewals keep it held
        held = True
        while time.monotonic() < deadline:
            held = held and not run.fenced
            time.sleep(0.05)
    return {"held": held, "history": asyncio.run(_history(url, job))}


async def _history(url: str, job: str) -> list[list[object]]:
    async with anarchon.connect(url) as store:
        return [[r.slot, str(r.status), r.holder] for r in await store.history(job, 10)]


def main() -> None:
    mode, url, job, *rest = sys.argv[1:]
    if mode == "race":
        result = race(url, job, int(rest[0]), rest[1])
    elif mode == "reuse":
        result = reuse(url, job, int(rest[0]))
    elif mode == "async":
        result = async_uses(url, job, int(rest[0]))
    elif mode == "fork":
        result = fork(url, job)
    elif mode == "heartbeat":
        result = heartbeat(url, job)
    else:
        raise SystemExit(f"unknown mode {mode!r}")
    print(json.dumps(result), flush=True)


if __name__ == "__main__":
    main()
