"""The race worker (C1 under real concurrency), for every backend: one OS process opens a store by
URL and claims the same slots from many asyncio tasks; a test starts several and counts winners.

Run as ``python -m anarchon_test_support.race_worker SPEC``, SPEC being the JSON object `race_spec`
makes. The worker prints ``ready`` once its store is open (with ``open_on_go``: before opening it,
so that many processes set up one new store at the same moment), reads one line from stdin as the
start signal, then prints one JSON list of results ``[slot, token, outcome, reason]``, one per
claim. Each of ``tasks`` asyncio tasks claims every slot in order, as a scheduler does, each claim
with a new token; with ``together``, every (slot, task) claim is in flight at once instead.

A backend's race test keeps only what differs: its URL and options, the slots, the claim's
fields, and what it asserts about the results (`winners`, `outcomes`).
"""

from __future__ import annotations

import asyncio
import json
import os
import sys
from collections import Counter, defaultdict
from collections.abc import Iterable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from subprocess import Popen
from typing import Any

from anarchon import ClaimRequest, ClaimStore, create_store

from .processes import worker_processes

__all__ = ["Result", "claim_in_order", "outcomes", "race_processes", "race_spec", "winners"]

Result = tuple[int, str, str, "str | None"]
"""One claim: its slot, its token, its outcome (``won``, ``lost``...) and the claim's reason."""


def race_spec(
    url: str,
    slots: Sequence[int],
    tasks: int,
    *,
    job: str = "race",
    options: Mapping[str, Any] | None = None,
    request: Mapping[str, Any] | None = None,
    together: bool = False,
    open_on_go: bool = False,
) -> dict[str, Any]:
    """The worker's SPEC: `options` go to `anarchon.create_store` with `url`; `request` holds the
    `ClaimRequest` fields besides job, slot, instance and token (``lease_ms``, ``max_late_ms``,
    ``overlap``...; JSON values)."""
    return {
        "url": url,
        "slots": list(slots),
        "tasks": tasks,
        "job": job,
        "options": dict(options or {}),
        "request": dict(request or {}),
        "together": together,
        "open_on_go": open_on_go,
    }


@contextmanager
def race_processes(spec: Mapping[str, Any], n: int) -> Iterator[list[Popen[str]]]:
    """`n` race workers on `spec` (see `worker_processes`: then `wait_ready`, `go`, `finish`)."""
    with worker_processes(["-m", f"{__package__}.race_worker"], n, json.dumps(spec)) as procs:
        yield procs


async def claim_in_order(
    store: ClaimStore,
    job: str,
    slots: Iterable[int],
    instance: str,
    **fields: Any,
) -> list[Result]:
    """Claim every slot of `slots` in turn on `store`, each with a new token."""
    return [await _claim(store, job, slot, instance, fields) for slot in slots]


async def _claim(
    store: ClaimStore, job: str, slot: int, instance: str, fields: Mapping[str, Any]
) -> Result:
    request = ClaimRequest(job=job, slot=slot, instance=instance, **fields)
    claim = await store.claim(request)
    return (slot, request.token, claim.outcome.value, claim.reason)


def winners(results: Iterable[Sequence[Any]]) -> dict[int, list[str]]:
    """The tokens that won each slot (C1: one each; C4: every slot has one)."""
    won: dict[int, list[str]] = defaultdict(list)
    for slot, token, outcome, _reason in results:
        if outcome == "won":
            won[slot].append(token)
    return dict(won)


def outcomes(results: Iterable[Sequence[Any]]) -> Counter[str]:
    """How many claims had each outcome."""
    return Counter(outcome for _slot, _token, outcome, _reason in results)


async def race(spec: Mapping[str, Any]) -> list[Result]:
    """One worker's part of the race (see the module's docstring)."""
    store = create_store(spec["url"], **spec["options"])
    if not spec["open_on_go"]:
        await store.open()
    sys.stdout.write("ready\n")
    sys.stdout.flush()
    await asyncio.get_running_loop().run_in_executor(None, sys.stdin.readline)
    try:
        if spec["open_on_go"]:
            await store.open()
        name = f"proc-{os.getpid()}"
        job, slots, fields = spec["job"], spec["slots"], spec["request"]
        if spec["together"]:
            return await asyncio.gather(
                *(
                    _claim(store, job, slot, f"{name}:{t:04x}", fields)
                    for slot in slots
                    for t in range(spec["tasks"])
                )
            )
        batches = await asyncio.gather(
            *(
                claim_in_order(store, job, slots, f"{name}:{t:04x}", **fields)
                for t in range(spec["tasks"])
            )
        )
        return [result for batch in batches for result in batch]
    finally:
        await store.close()
