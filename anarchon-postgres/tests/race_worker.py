"""A separate OS process for the race tests: opens a PostgreSQL store, waits for "go", claims.

Usage: ``python race_worker.py URL JOB FIRST_SLOT SLOTS TASKS [open-on-go]``. Prints ``ready``
once the store is open (with ``open-on-go``: before opening it, so that many processes create one
new schema at the same moment), reads one line from stdin as the start signal, then prints one
JSON object ``{"won": [[slot, token], ...], "outcomes": {"won": n, ...}}``. Each of TASKS asyncio
tasks claims every slot from FIRST_SLOT (step 1000 ms), in order, each claim with a new token.
"""

from __future__ import annotations

import asyncio
import json
import os
import sys
from collections import Counter

from anarchon import ClaimRequest, Overlap
from anarchon_postgres import PostgresStore

STEP_MS = 1000
HOUR_MS = 3_600_000


async def claim_all(
    store: PostgresStore, job: str, first: int, count: int, name: str
) -> list[tuple[int, str, str]]:
    results = []
    for i in range(count):
        slot = first + i * STEP_MS
        request = ClaimRequest(
            job=job,
            slot=slot,
            instance=name,
            lease_ms=HOUR_MS,
            max_late_ms=HOUR_MS,
            overlap=Overlap.ALLOW,
        )
        claim = await store.claim(request)
        results.append((slot, claim.outcome.value, request.token))
    return results


async def main(url: str, job: str, first: int, count: int, tasks: int, open_on_go: bool) -> None:
    store = PostgresStore.create(url, pool_max_size=tasks)
    if not open_on_go:
        await store.open()
    print("ready", flush=True)
    await asyncio.get_running_loop().run_in_executor(None, sys.stdin.readline)
    if open_on_go:
        await store.open()
    name = f"proc-{os.getpid()}"
    batches = await asyncio.gather(
        *(claim_all(store, job, first, count, f"{name}-{t}") for t in range(tasks))
    )
    await store.close()
    results = [r for batch in batches for r in batch]
    print(
        json.dumps(
            {
                "won": [[slot, token] for slot, outcome, token in results if outcome == "won"],
                "outcomes": Counter(outcome for _, outcome, _ in results),
            }
        ),
        flush=True,
    )


if __name__ == "__main__":
    url, job, first, count, tasks = sys.argv[1:6]
    open_on_go = sys.argv[6:] == ["open-on-go"]
    asyncio.run(main(url, job, int(first), int(count), int(tasks), open_on_go))
