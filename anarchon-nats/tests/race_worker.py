"""A separate OS process for the race test: opens a NATS store, waits for "go", claims.

Usage: ``python race_worker.py URL PREFIX STRATEGY JOB FIRST_SLOT SLOTS TASKS``. Prints ``ready``
once the store is open, reads one line from stdin as the start signal, then prints one JSON list
of ``[slot, token]`` for the claims it won. Each of TASKS asyncio tasks claims every slot from
FIRST_SLOT (step 100 ms), in order, each claim with a new token.
"""

from __future__ import annotations

import asyncio
import json
import os
import sys
from typing import Any

from anarchon import ClaimRequest, Outcome
from anarchon_nats import NATSStore

STEP_MS = 100
HOUR_MS = 3_600_000


async def claim_all(store: NATSStore, job: str, first: int, count: int, name: str) -> list[Any]:
    won = []
    for i in range(count):
        request = ClaimRequest(
            job=job, slot=first + i * STEP_MS, instance=name, max_late_ms=HOUR_MS
        )
        claim = await store.claim(request)
        assert claim.outcome in (Outcome.WON, Outcome.LOST), claim
        if claim.won:
            won.append([request.slot, request.token])
    return won


async def main(
    url: str, prefix: str, strategy: str, job: str, first: int, count: int, tasks: int
) -> None:
    store = NATSStore.create(url, prefix=prefix, strategy=strategy)
    await store.open()
    print("ready", flush=True)
    await asyncio.get_running_loop().run_in_executor(None, sys.stdin.readline)
    name = f"proc-{os.getpid()}"
    batches = await asyncio.gather(
        *(claim_all(store, job, first, count, f"{name}-{t}") for t in range(tasks))
    )
    await store.close()
    print(json.dumps([w for batch in batches for w in batch]), flush=True)


if __name__ == "__main__":
    url, prefix, strategy, job, first, count, tasks = sys.argv[1:8]
    asyncio.run(main(url, prefix, strategy, job, int(first), int(count), int(tasks)))
