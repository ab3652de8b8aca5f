"""A separate OS process for the claim_many race: ``python many_worker.py URL SLOT JOBS``.

Opens the store, prints ``ready``, waits for a line on stdin, then claims jobs ``j-0000`` ...
in one `claim_many` of one slot (each process in a shuffled order) and prints one JSON object
``{"won": [[job, token], ...], "outcomes": {"won": n, ...}}``.
"""

from __future__ import annotations

import asyncio
import json
import os
import random
import sys
from collections import Counter

from anarchon import ClaimRequest
from anarchon_postgres import PostgresStore


async def main(url: str, slot: int, jobs: int) -> None:
    store = PostgresStore.create(url, pool_max_size=1)
    await store.open()
    names = [f"j-{i:04d}" for i in range(jobs)]
    random.shuffle(names)
    name = f"proc-{os.getpid()}"
    requests = [
        ClaimRequest(job=job, slot=slot, instance=name, lease_ms=3_600_000, max_late_ms=3_600_000)
        for job in names
    ]
    print("ready", flush=True)
    await asyncio.get_running_loop().run_in_executor(None, sys.stdin.readline)
    claims = await store.claim_many(requests)
    await store.close()
    print(
        json.dumps(
            {
                "won": [[r.job, r.token] for r, c in zip(requests, claims, strict=True) if c.won],
                "outcomes": Counter(c.outcome.value for c in claims),
            }
        ),
        flush=True,
    )


if __name__ == "__main__":
    asyncio.run(main(sys.argv[1], int(sys.argv[2]), int(sys.argv[3])))
