"""``python -m bench.chaos.worker SPEC``: one racing process of the failover harness.

SPEC is the JSON object `harness.worker_spec` makes. The worker prints ``ready`` once its store is
open, waits for a line on stdin (``go``), claims its slots (see the package's docstring) until a
second line (``stop``) or ``spec["slots"]``, and appends one JSON line per answer to
``spec["out"]``: ``[slot, token, outcome, tries, answered_ms, lane]``. With ``spec["jobs"]``
above 1 it runs that many lanes at once, each racing its own job (``JOB-0``, ``JOB-1``, ...) on
the same ascending slots: independent races, each slot of each still contested by every
claimant.
"""

from __future__ import annotations

import asyncio
import json
import os
import sys
import time
from typing import IO, Any

from anarchon import AnarchonError, ClaimRequest, ClaimStore, Outcome, create_store

RESEND_PAUSE_S = 0.02
"""The pause before sending a claim again after an error or an ``unknown`` answer."""


async def claim_until_decided(
    store: ClaimStore, request: ClaimRequest, give_up_ms: int
) -> tuple[str, int, int]:
    """Send `request` (same token) until a definite answer or `give_up_ms`: (outcome, tries,
    the wall-clock ms of the answer)."""
    deadline = time.monotonic() + give_up_ms / 1000
    tries = 0
    while True:
        tries += 1
        try:
            claim = await store.claim(request)
            if claim.outcome is not Outcome.UNKNOWN:
                return claim.outcome.value, tries, int(time.time() * 1000)
        except (AnarchonError, OSError, asyncio.TimeoutError):
            pass
        if time.monotonic() >= deadline:
            return Outcome.UNKNOWN.value, tries, int(time.time() * 1000)
        await asyncio.sleep(RESEND_PAUSE_S)


async def open_store(spec: dict[str, Any]) -> ClaimStore:
    """The store of `spec`, opened (retried for a while: a topology may still be settling)."""
    deadline = time.monotonic() + 30
    while True:
        store = create_store(spec["url"], **spec["options"])
        try:
            await store.open()
            return store
        except (AnarchonError, OSError):
            await store.close()
            if time.monotonic() >= deadline:
                raise
            await asyncio.sleep(0.2)


async def race(spec: dict[str, Any]) -> None:
    store = await open_store(spec)
    sys.stdout.write("ready\n")
    sys.stdout.flush()
    loop = asyncio.get_running_loop()
    await loop.run_in_executor(None, sys.stdin.readline)
    stop = loop.run_in_executor(None, sys.stdin.readline)
    name = f"chaos-{os.getpid()}"
    out: IO[str]
    with open(spec["out"], "a", encoding="utf-8") as out:  # noqa: ASYNC230 (once, local)

        async def lane(number: int) -> None:
            job = lane_job(spec["job"], spec.get("jobs", 1), number)
            for i in range(spec["slots"]):
                if stop.done():
                    break
                slot = spec["first_slot"] + i * spec["step_ms"]
                requests = [
                    ClaimRequest(job=job, slot=slot, instance=f"{name}-{t}", **spec["request"])
                    for t in range(spec["tasks"])
                ]
                answers = await asyncio.gather(
                    *(claim_until_decided(store, r, spec["give_up_ms"]) for r in requests)
                )
                for request, (outcome, tries, answered_ms) in zip(requests, answers, strict=True):
                    line = [slot, request.token, outcome, tries, answered_ms, number]
                    out.write(json.dumps(line) + "\n")
                out.flush()

        try:
            await asyncio.gather(*(lane(n) for n in range(spec.get("jobs", 1))))
        finally:
            await store.close()


def lane_job(job: str, jobs: int, number: int) -> str:
    """The job that lane `number` of `jobs` races on: `job` itself when there is one lane."""
    return job if jobs == 1 else f"{job}-{number}"


if __name__ == "__main__":
    asyncio.run(race(json.loads(sys.argv[1])))
