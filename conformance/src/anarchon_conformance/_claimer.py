"""A claiming instance in its own OS process, for the C1 process check.

``python -m anarchon_conformance._claimer '<json>'`` opens the store at ``url``, waits for the
shared start instant, claims every slot from many asyncio tasks (resending a claim the store
failed with `StoreUnavailable`, as the scheduler does), and prints the wins as JSON.
"""

from __future__ import annotations

import asyncio
import json
import sys
import time
from typing import Any

from anarchon import ClaimRequest, Overlap, connect, new_token

from ._harness import register_plugins
from ._resend import claim_as_scheduled


async def claim_all(spec: dict[str, Any]) -> list[list[Any]]:
    register_plugins(spec["plugins"])
    async with connect(spec["url"], prefix=spec["prefix"]) as store:
        delay = spec["start_at"] - time.time()
        if delay > 0:
            await asyncio.sleep(delay)

        async def one(slot: int) -> list[Any] | None:
            request = ClaimRequest(
                job=spec["job"],
                slot=slot,
                token=new_token(),
                instance=spec["instance"],
                lease_ms=60_000,
                max_late_ms=spec["max_late_ms"],
                overlap=Overlap.ALLOW,
            )
            claim = await claim_as_scheduled(store, request)
            return [slot, request.token, claim.attempt] if claim.won else None

        jobs = [one(slot) for slot in spec["slots"] for _ in range(spec["tasks"])]
        results = await asyncio.gather(*jobs)
    return [r for r in results if r is not None]


def main() -> None:
    spec = json.loads(sys.argv[1])
    sys.stdout.write(json.dumps(asyncio.run(claim_all(spec))) + "\n")


if __name__ == "__main__":
    main()
