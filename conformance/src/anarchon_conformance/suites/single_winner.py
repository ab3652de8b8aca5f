"""C1: for each (job, slot, attempt) at most one claim is `won`; C4: a slot that is not late and
has no run is won (by exactly one of many claimers)."""

from __future__ import annotations

import asyncio
import collections
import json
import os
import sys
import time

import pytest

from anarchon import Outcome

from .._harness import BackendHarness
from .._rules import rule
from ._base import HarnessSuite, claim_as_scheduled, require, within

__all__ = ["SingleWinnerTests"]


class SingleWinnerTests(HarnessSuite):
    """C1 with asyncio tasks on several store objects, with OS processes, and on takeovers."""

    c1_instances = 4
    c1_tasks = 8
    c1_slots = 6
    c1_processes = 3

    @rule("C1")
    @pytest.mark.asyncio
    async def test_C1_single_winner_tasks(self, harness: BackendHarness) -> None:
        stores = [await self.open(harness) for _ in range(self.c1_instances)]
        base = await self.current_slot(stores[0])
        slots = [base - i * 1000 for i in range(self.slots_per_job(harness))]
        requests = [
            (slot, self.request("c1", slot, instance=f"host:{i}:{t:04x}"))
            for slot in slots
            for i in range(self.c1_instances)
            for t in range(self.c1_tasks)
        ]
        claims = await within(
            asyncio.gather(
                *(
                    claim_as_scheduled(stores[n % len(stores)], r)
                    for n, (_, r) in enumerate(requests)
                )
            ),
            60,
        )
        winners: dict[int, list[str]] = collections.defaultdict(list)
        for (slot, request), claim in zip(requests, claims, strict=True):
            if claim.won:
                winners[slot].append(request.token)
            else:
                assert claim.outcome is not Outcome.LATE, f"slot {slot} is not late: {claim}"
        for slot in slots:
            assert len(winners[slot]) <= 1, (
                f"C1: {len(winners[slot])} of {len(requests) // len(slots)} claims of slot {slot} "
                f"were won, at most one may be: {winners[slot]}"
            )
        if harness.capabilities.leases:
            for slot in slots:
                if not winners[slot]:
                    continue  # C4 is checked on its own
                run = await within(harness.raw_run("c1", slot))
                assert run is not None and run.token == winners[slot][0], (
                    f"C1: the store holds {run} for slot {slot}, the winner was {winners[slot][0]}"
                )

    @rule("C1")
    @pytest.mark.asyncio
    async def test_C1_single_winner_takeover_tasks(self, harness: BackendHarness) -> None:
        require(harness, "leases")
        stores = [await self.open_lease(harness) for _ in range(self.c1_instances)]
        slot = await self.current_slot(stores[0])
        first = await within(stores[0].claim(self.request("c1t", slot)))
        assert first.won and first.attempt == 1, first
        for attempt in (2, 3):
            await within(harness.force_expire("c1t", slot))
            requests = [
                self.request("c1t", slot, instance=f"host:{n}:0000")
                for n in range(self.c1_instances * self.c1_tasks)
            ]
            claims = await within(
                asyncio.gather(*(stores[n % len(stores)].claim(r) for n, r in enumerate(requests))),
                60,
            )
            won = [c for c in claims if c.won]
            assert len(won) == 1, f"C1: {len(won)} winners of takeover attempt {attempt}"
            assert won[0].attempt == attempt, won[0]

    @rule("C1")
    @pytest.mark.asyncio
    async def test_C1_single_winner_processes(self, harness: BackendHarness) -> None:
        url = harness.process_url()
        if url is None:
            pytest.skip(
                "not applicable: the store lives in one process (harness.process_url() is None); "
                "C1 is certified by the task check"
            )
        store = await self.open(harness)
        base = await self.current_slot(store)
        slots = [base - i * 1000 for i in range(self.slots_per_job(harness))]
        start_at = time.time() + 3.0
        env = {**os.environ, "PYTHONPATH": os.pathsep.join(p for p in sys.path if p)}
        procs = []
        for n in range(self.c1_processes):
            spec = {
                "url": url,
                "prefix": harness.process_prefix,
                "plugins": list(harness.plugins),
                "job": "c1p",
                "slots": slots,
                "tasks": self.c1_tasks,
                "start_at": start_at,
                "instance": f"proc:{n}:0000",
                "max_late_ms": self.max_late_ms,
            }
            procs.append(
                await asyncio.create_subprocess_exec(
                    sys.executable,
                    "-m",
                    "anarchon_conformance._claimer",
                    json.dumps(spec),
                    stdout=asyncio.subprocess.PIPE,
                    stderr=asyncio.subprocess.PIPE,
                    env=env,
                )
            )
        try:
            outputs = await within(asyncio.gather(*(p.communicate() for p in procs)), 90)
        finally:
            for proc in procs:
                if proc.returncode is None:
                    proc.kill()
                    await proc.wait()
        winners: dict[int, list[str]] = collections.defaultdict(list)
        for proc, (out, err) in zip(procs, outputs, strict=True):
            assert proc.returncode == 0, f"claiming process failed:\n{err.decode()}"
            for slot, token, _attempt in json.loads(out):
                winners[slot].append(token)
        for slot in slots:
            assert len(winners[slot]) <= 1, (
                f"C1: {len(winners[slot])} claims from {self.c1_processes} processes won slot "
                f"{slot}, at most one may: {winners[slot]}"
            )

    def slots_per_job(self, harness: BackendHarness) -> int:
        """`c1_slots`, or one when the store takes a job's claims in slot order only."""
        return 1 if harness.claims_in_slot_order else self.c1_slots

    @rule("C4")
    @pytest.mark.asyncio
    async def test_C4_a_free_slot_is_won(self, harness: BackendHarness) -> None:
        store = await self.open(harness)
        other = await self.open(harness)
        slot = await self.current_slot(store)
        for job, at, by in (("c4", slot - 1000, store), ("c4", slot, other), ("c4b", slot, store)):
            answer = await within(by.claim(self.request(job, at)))
            assert answer.won and answer.attempt == 1, (
                f"C4: a claim of a slot that is not late and has no run must be won "
                f"(attempt 1), got {answer}"
            )

    @rule("C4")
    @pytest.mark.asyncio
    async def test_C4_contended_slots_are_won_once(self, harness: BackendHarness) -> None:
        """Many instances race for a few fresh slots: each slot is won by exactly one (C1
        bounds it from above; C4 says somebody wins: a store that answers `lost` to everyone
        under contention is not live)."""
        stores = [await self.open(harness) for _ in range(self.c1_instances)]
        base = await self.current_slot(stores[0])
        slots = [base - i * 1000 for i in range(min(3, self.slots_per_job(harness)))]
        requests = [
            (slot, self.request("c4race", slot, instance=f"host:{i}:0c40"))
            for slot in slots
            for i in range(self.c1_instances * 2)
        ]
        claims = await within(
            asyncio.gather(
                *(
                    claim_as_scheduled(stores[n % len(stores)], r)
                    for n, (_, r) in enumerate(requests)
                )
            ),
            60,
        )
        for slot in slots:
            answers = [c for (s, _), c in zip(requests, claims, strict=True) if s == slot]
            won = sum(c.won for c in answers)
            assert won == 1, (
                f"C4: {len(answers)} instances claimed slot {slot}, which is not late and had no "
                f"run: exactly one must win, {won} did ({[str(c.outcome) for c in answers]})"
            )
