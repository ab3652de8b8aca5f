"""One OS process of the race test: `tasks` asyncio tasks each claim every slot in order, on one
store; prints the won (slot, token) pairs as JSON. Run by test_race.py."""

from __future__ import annotations

import asyncio
import json
import sys
import time

import anarchon
from anarchon import ClaimRequest, Overlap, new_token


async def main(spec: dict[str, object]) -> None:
    store = await anarchon.connect(
        str(spec["url"]), strategy=str(spec["strategy"]), prefix=str(spec["prefix"])
    )
    slots = [int(s) for s in spec["slots"]]  # type: ignore[attr-defined]
    delay = float(spec["start_at"]) - time.time()  # type: ignore[arg-type]
    if delay > 0:
        await asyncio.sleep(delay)

    async def task(n: int) -> list[tuple[int, str, str]]:
        won = []
        for slot in slots:
            request = ClaimRequest(
                job=str(spec["job"]),
                slot=slot,
                token=new_token(),
                instance=f"{spec['instance']}:{n:04x}",
                max_late_ms=120_000,  # within every window (C5 refuses claims beyond it)
                overlap=Overlap.ALLOW,
            )
            claim = await store.claim(request)
            if claim.won:
                won.append((slot, request.token, claim.outcome.value))
            elif claim.outcome.value not in ("lost", "running"):
                won.append((slot, "", claim.outcome.value))
        return won

    try:
        results = await asyncio.gather(*(task(n) for n in range(int(spec["tasks"]))))  # type: ignore[call-overload]
    finally:
        await store.close()
    print(json.dumps([item for result in results for item in result]))


if __name__ == "__main__":
    asyncio.run(main(json.loads(sys.argv[1])))
