"""One process of the fleet benchmark: many simulated instances on a few store clients.

Every instance computes its role per (job, slot) with `anarchon.backend.contenders` over the
fleet's member ids. At the slot, contenders claim their jobs in one `claim_many`; the others wait
`grace`, then read before they write: only what is still undecided is claimed. Dead instances
never claim (the kill phase). Each instance reports, per job it won, when its call returned.
"""

from __future__ import annotations

import asyncio
import json
import resource
import time
from typing import Any

from anarchon import ClaimRequest, ClaimStore, LeaseStore, Overlap, create_store
from anarchon.backend import contenders

__all__ = ["Plan", "main"]

Plan = dict[str, Any]
"""url, backend, members (all ids), local (this process's ids), dead, jobs, slot, k, grace_s,
fallback (``check``, ``batch`` or ``live``), clients (stores to open here)."""

IN_FLIGHT = 4
"""Checks a store client has in flight at once, whichever instances send them; its claim_many
calls go one at a time. Without a bound, 64 instances on one client make it open a connection
each (Redis) or wait for its pool (PostgreSQL) until they time out on a starved machine."""


def _request(job: str, slot: int, instance: str) -> ClaimRequest:
    return ClaimRequest(
        job=job,
        slot=slot,
        instance=instance,
        lease_ms=3_600_000,
        max_late_ms=100_000,
        overlap=Overlap.ALLOW,
    )


async def _nats_undecided(store: Any, requests: list[ClaimRequest]) -> list[ClaimRequest]:
    """NATS's read shortcut: one message get (last on the run's subject) per run, all at once.
    A run is decided when that message holds its slot: msg-id keeps one subject per job, so the
    last message may be an older slot's claim (then the run is undecided)."""
    from nats.js.errors import NotFoundError

    from anarchon_nats._answers import read_stored
    from anarchon_nats._records import decode

    link = store._opened()

    async def decided(request: ClaimRequest) -> bool:
        query = {"last_by_subj": store.strategy.subject(request.job, request.slot)}
        answer = await link.replies.request(
            link.get_api, json.dumps(query).encode(), None, link.timeout
        )
        try:
            seq, data = read_stored(answer)
        except NotFoundError:
            return False
        return decode(data, stream=link.stream, seq=seq).slot == request.slot

    found = await asyncio.gather(*(decided(r) for r in requests))
    return [r for r, d in zip(requests, found, strict=True) if not d]


class Instance:
    def __init__(
        self,
        name: str,
        store: ClaimStore,
        gates: tuple[asyncio.Semaphore, asyncio.Lock],
        plan: Plan,
        table: dict[str, list[str]],
    ) -> None:
        self.name, self.store, self.plan = name, store, plan
        self.gate, self.one_call = gates
        k = plan["k"]
        self.contended = [j for j in plan["jobs"] if name in table[j][:k]]
        dead = set(plan["dead"])
        others = [j for j in plan["jobs"] if name not in table[j]]
        if plan["fallback"] in ("live", "tiers"):
            # The member list re-read after the grace no longer shows the dead (their heartbeat
            # ran out): fall back only where no contender (nor watcher) is left alive.
            others = [j for j in others if set(table[j]) <= dead]
        # tiers: the table lists k contenders, then the watchers, who claim after the grace.
        watched = [j for j in plan["jobs"] if name in table[j][k:]]
        self.fallback = watched + others
        self.won: list[tuple[str, float]] = []
        self.calls = 0
        self.claimed = 0
        self.read = 0
        self.contend_s: float | None = None

    async def _claim(self, jobs: list[str]) -> float:
        """Claim `jobs` in one call; returns its duration."""
        if not jobs:
            return 0.0
        slot = self.plan["slot"]
        requests = [_request(j, slot, self.name) for j in jobs]
        async with self.one_call:
            started = time.perf_counter()
            claims = await self.store.claim_many(requests)  # type: ignore[attr-defined]
            elapsed = time.perf_counter() - started
        ended = time.time()
        self.calls += 1
        self.claimed += len(requests)
        self.won += [(r.job, ended) for r, c in zip(requests, claims, strict=True) if c.won]
        return elapsed

    async def run(self, t0: float) -> None:
        if self.name in self.plan["dead"]:
            return
        if self.contended:
            self.contend_s = await self._claim(self.contended)
        if not self.fallback:
            return
        await asyncio.sleep(max(0.0, t0 + self.plan["grace_s"] - time.time()))
        if self.plan["fallback"] == "check":
            await self._check(self.fallback)
        else:
            # The claim step reads first: a decided run answers lost/running without a write.
            await self._claim(self.fallback)

    async def _check(self, jobs: list[str]) -> None:
        """Read before writing, one call per job: `LeaseStore.check` (L10: a plain read; the
        claim step only for an undecided run), NATS's message get then a claim of what is
        undecided; a store with neither claims (its claim is its read)."""
        requests = [_request(j, self.plan["slot"], self.name) for j in jobs]
        if self.plan["backend"] == "nats":
            self.read += len(requests)
            self.calls += len(requests)
            undecided = await _nats_undecided(self.store, requests)
            await self._claim([r.job for r in undecided])
            return
        if not isinstance(self.store, LeaseStore):
            await self._claim(jobs)
            return
        gate, store = self.gate, self.store

        async def one(request: ClaimRequest) -> tuple[str, float] | None:
            async with gate:
                claim = await store.check(request)
            return (request.job, time.time()) if claim.won else None

        answers = await asyncio.gather(*(one(r) for r in requests))
        self.read += len(requests)
        self.calls += len(requests)
        self.won += [a for a in answers if a is not None]

    def report(self) -> dict[str, Any]:
        return {
            "instance": self.name,
            "won": self.won,
            "calls": self.calls,
            "claimed": self.claimed,
            "read": self.read,
            "contend_s": self.contend_s,
        }


async def _cell(plan: Plan, barriers: Any) -> dict[str, Any]:
    """One run: set up, wait with the others (the parent snapshots the server), go, report,
    wait until every process is done and the parent has snapshot the server again, close."""
    ready, go, done, measured = barriers
    members, k = plan["members"], plan["k"]
    if plan["fallback"] == "tiers":
        k += plan["watchers"]
    if k >= len(members):
        table = {j: list(members) for j in plan["jobs"]}
    else:
        table = {j: contenders(members, j, plan["slot"], k) for j in plan["jobs"]}
    stores = [create_store(plan["url"]) for _ in range(plan["clients"])]
    try:
        for store in stores:
            await store.open()
            # A new connection's first claim loads what the server caches per connection
            # (PostgreSQL: catalog, the function's plan): done before the run is measured.
            warm = _request("warm", plan["slot"], "bench:warm")
            await store.claim_many([warm])  # type: ignore[attr-defined]
            if isinstance(store, LeaseStore):
                await store.check(warm)
        gates = [(asyncio.Semaphore(IN_FLIGHT), asyncio.Lock()) for _ in stores]
        instances = [
            Instance(name, stores[i % len(stores)], gates[i % len(stores)], plan, table)
            for i, name in enumerate(plan["local"])
        ]
        await asyncio.to_thread(ready.wait)
        await asyncio.to_thread(go.wait)
        before = resource.getrusage(resource.RUSAGE_SELF)
        t0 = time.time()
        await asyncio.gather(*(i.run(t0) for i in instances))
        after = resource.getrusage(resource.RUSAGE_SELF)
        await asyncio.to_thread(done.wait)
        await asyncio.to_thread(measured.wait)
    finally:
        for store in stores:
            await store.close()
    cpu = (after.ru_utime + after.ru_stime) - (before.ru_utime + before.ru_stime)
    return {"t0": t0, "cpu_s": cpu, "instances": [i.report() for i in instances]}


def main(inbox: Any, barriers: Any, out: Any) -> None:
    """A worker process: runs each plan from `inbox` (None ends it); its report, or
    ``{"error": ...}``, goes to `out`."""
    while (plan := inbox.get()) is not None:
        try:
            out.put(asyncio.run(_cell(plan, barriers)))
        except BaseException as exc:  # noqa: BLE001 - reported to the parent, which fails the run
            for barrier in barriers:
                barrier.abort()
            out.put({"error": f"{type(exc).__name__}: {exc}"})
