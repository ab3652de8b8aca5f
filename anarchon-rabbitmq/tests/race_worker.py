"""One OS process of the C1 race: ``python race_worker.py '<json>'`` claims every slot from many
tasks on one store and prints its wins as JSON."""

from __future__ import annotations

import asyncio
import json
import sys
import time
from typing import Any

from anarchon import ClaimRequest, Overlap, connect


async def race(spec: dict[str, Any]) -> list[list[Any]]:
    # Thousands of claims in flight queue up in the client: allow for it in the confirm timeout.
    async with connect(spec["url"], prefix=spec["prefix"], confirm_timeout_ms="60s") as store:
        delay = spec["start_at"] - time.time()
        if delay > 0:
            await asyncio.sleep(delay)

        async def one(slot: int, task: int) -> list[Any] | None:
            request = ClaimRequest(
                job="race",
                slot=slot,
                instance=f"{spec['name']}:{task}:0000",
                max_late_ms=600_000,
                overlap=Overlap.ALLOW,
            )
            claim = await store.claim(request)
            return [slot, request.token, str(claim.outcome), claim.reason]

        results = await asyncio.gather(
            *(one(slot, t) for slot in spec["slots"] for t in range(spec["tasks"]))
        )
    return [r for r in results if r is not None]


if __name__ == "__main__":
    sys.stdout.write(json.dumps(asyncio.run(race(json.loads(sys.argv[1])))) + "\n")
