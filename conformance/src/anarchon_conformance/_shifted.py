"""A claiming instance whose wall clock is shifted, for the T1 check.

``python -m anarchon_conformance._shifted '<json>'`` runs under libfaketime (``LD_PRELOAD``,
``FAKETIME="+30s"``; the monotonic clock is left alone), opens the store at ``url``, sends the
claims of the spec in order, and prints its own wall clock, the store's `now_ms()` and the
answers as JSON. The store's server runs unshifted: only this client's clock is wrong.
"""

from __future__ import annotations

import asyncio
import json
import sys
import time
from typing import Any

from anarchon import ClaimRequest, Overlap, connect

from ._harness import register_plugins
from ._resend import claim_as_scheduled


async def claim_all(spec: dict[str, Any]) -> dict[str, Any]:
    register_plugins(spec["plugins"])
    wall = time.time_ns() // 1_000_000
    answers = []
    async with connect(spec["url"], prefix=spec["prefix"]) as store:
        now = await store.now_ms()
        for sent in spec["claims"]:
            request = ClaimRequest(
                job=sent["job"],
                slot=sent["slot"],
                token=sent["token"],
                instance="shifted:1:0071",
                lease_ms=sent["lease_ms"],
                max_late_ms=sent["max_late_ms"],
                overlap=Overlap.ALLOW,
            )
            claim = await claim_as_scheduled(store, request)
            answers.append([claim.outcome.value, claim.attempt, claim.reason])
    return {"wall_ms": wall, "now_ms": now, "answers": answers}


def main() -> None:
    spec = json.loads(sys.argv[1])
    sys.stdout.write(json.dumps(asyncio.run(claim_all(spec))) + "\n")


if __name__ == "__main__":
    main()
