"""Instances in other processes: each opens its own store, waits at a barrier with the others,
claims its runs, and reports which it won and when it started and finished."""

from __future__ import annotations

import asyncio
import multiprocessing
import time
from typing import Any

from anarchon import ClaimRequest, Overlap, SupportsClaimMany, SupportsPrepare, create_store

__all__ = ["claim_runs", "prepare_slot", "run_instances"]

Run = tuple[str, int]


def _requests(runs: list[Run], instance: str) -> list[ClaimRequest]:
    return [
        ClaimRequest(
            job=job,
            slot=slot,
            instance=instance,
            lease_ms=3_600_000,
            max_late_ms=100_000,
            overlap=Overlap.ALLOW,
        )
        for job, slot in runs
    ]


async def prepare_slot(store: Any, jobs: list[str], slot: int) -> float | None:
    """The scheduler's preparation of a slot (`SupportsPrepare`), timed; None if the store has
    none (or it is turned off)."""
    if not isinstance(store, SupportsPrepare) or store.prepare_ahead_ms <= 0:
        return None
    started = time.perf_counter()
    await store.prepare(jobs, slot)
    return time.perf_counter() - started


async def claim_runs(
    store: Any, requests: list[ClaimRequest], batch: bool, in_flight: int | None = None
) -> list[bool]:
    """As the scheduler does: one batch (claim_many, else all at once) or one claim at a time.
    `in_flight` bounds the claims sent at once when the store has no claim_many (the bench's
    workaround for drivers whose pool refuses more connections, see `Target.in_flight`)."""
    if batch:
        if isinstance(store, SupportsClaimMany):
            claims = await store.claim_many(requests)
        elif in_flight is None:
            claims = list(await asyncio.gather(*(store.claim(r) for r in requests)))
        else:
            gate = asyncio.Semaphore(in_flight)

            async def one(request: ClaimRequest) -> Any:
                async with gate:
                    return await store.claim(request)

            claims = list(await asyncio.gather(*(one(r) for r in requests)))
        return [c.won for c in claims]
    return [(await store.claim(r)).won for r in requests]


async def _instance(
    url: str, runs: list[Run], instance: str, batch: bool, in_flight: int | None, barrier: Any
) -> dict[str, Any]:
    store = create_store(url)
    await store.open()
    try:
        requests = _requests(runs, instance)
        for slot in sorted({s for _, s in runs}):  # as every scheduler does before a slot
            await prepare_slot(store, [job for job, s in runs if s == slot], slot)
        await asyncio.to_thread(barrier.wait)
        started = time.time()
        won = await claim_runs(store, requests, batch, in_flight)
        ended = time.time()
    finally:
        await store.close()
    return {"won": [i for i, w in enumerate(won) if w], "started": started, "ended": ended}


def _main(
    url: str,
    runs: list[Run],
    instance: str,
    batch: bool,
    in_flight: int | None,
    barrier: Any,
    out: Any,
) -> None:
    try:
        out.put(asyncio.run(_instance(url, runs, instance, batch, in_flight, barrier)))
    except BaseException as exc:  # noqa: BLE001 - reported to the parent, which fails
        barrier.abort()
        out.put({"error": f"{type(exc).__name__}: {exc}"})


def run_instances(
    url: str, runs: list[Run], processes: int, batch: bool, in_flight: int | None = None
) -> list[dict[str, Any]]:
    """Start `processes` instances, release them together, and collect their reports."""
    ctx = multiprocessing.get_context("spawn")
    barrier = ctx.Barrier(processes)
    out = ctx.Queue()
    procs = [
        ctx.Process(
            target=_main,
            args=(url, runs, f"bench:p{i}", batch, in_flight, barrier, out),
        )
        for i in range(processes)
    ]
    for p in procs:
        p.start()
    reports = [out.get(timeout=300) for _ in procs]
    for p in procs:
        p.join(30)
    errors = [r["error"] for r in reports if "error" in r]
    if errors:
        raise RuntimeError("an instance failed: " + "; ".join(errors))
    return reports
