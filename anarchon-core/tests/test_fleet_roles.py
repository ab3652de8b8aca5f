"""The roles of a slot (DESIGN section 12): the ranking functions, the job-set fingerprint that
keeps instances with other jobs out of each other's roles, and the silent instances that claim
a slot once its contenders and watchers have all left the list. In one process, on memory://;
real processes are in test_fleet_processes.py."""

from __future__ import annotations

import asyncio
import random
import time

import pytest

from anarchon import MemoryStore, Run, RunRecord, RunStatus, Scheduler
from anarchon._fleet import all_departed, contenders, job_set_fingerprint, rank_above
from anarchon._runtime.fleet import Role, job_signature
from anarchon_test_support import eventually


def test_rank_above_and_all_departed_agree_with_the_full_ranking() -> None:
    rng = random.Random(7)
    for case in range(300):
        names = [f"m{i}" for i in rng.sample(range(40), rng.randint(1, 12))]
        job, slot, top = f"job{case % 5}", case * 1000, rng.randint(1, 4)
        ranked = contenders(names, job, slot, len(names))
        for me in names:
            above = ranked.index(me)
            assert rank_above(names, me, job, slot, top) == min(above, top)
        departed = set(rng.sample(names, rng.randint(0, len(names))))
        live = [n for n in names if n not in departed]
        expected = len(ranked) >= top and set(ranked[:top]) <= departed
        assert all_departed(live, departed, job, slot, top) is expected, (names, departed, top)


def test_the_job_set_fingerprint_changes_with_any_job_or_schedule() -> None:
    base = job_set_fingerprint(["a\x00* * * * *", "b\x00every 30s"])
    assert base == job_set_fingerprint(["b\x00every 30s", "a\x00* * * * *"]), "order-free"
    assert base != job_set_fingerprint(["a\x00* * * * *"])
    assert base != job_set_fingerprint(["a\x00*/2 * * * *", "b\x00every 30s"])
    assert 0 <= base < 2**52, "exact as a JSON number anywhere"


def _scheduler(store: MemoryStore, name: str) -> Scheduler:
    return Scheduler(
        store,
        instance=name,
        environ={},
        contenders=1,
        fleet_refresh="200ms",
        fleet_grace="300ms",
    )


@pytest.mark.slow
async def test_an_instance_without_the_job_is_not_counted_on() -> None:
    """A rolling deploy: "new" runs jobs a and b, "old" only a. Each counts only the members
    with its own job set, so b is contended by "new" at every slot (never left to "old", which
    would never claim it), and both still share nothing they would lose."""
    store = MemoryStore.create("job-sets")
    started: dict[tuple[str, int], int] = {}
    new, old = _scheduler(store, "new"), _scheduler(store, "old")
    for s, jobs in ((new, ("a", "b")), (old, ("a",))):
        for job in jobs:

            @s.job("* * * * * *", name=job, max_late="900ms")
            def tick(run: Run, s: Scheduler = s) -> None:
                started.setdefault((run.job, run.slot), s.store_clock.now_ms())

    async with new, old:
        assert new.fleet is not None and old.fleet is not None
        assert new.fleet.job_set != old.fleet.job_set
        await eventually(lambda: len(new.fleet.members) == 2 if new.fleet else False, 5)
        first = new.store_clock.now_ms() // 1000 * 1000 + 2000
        await eventually(lambda: len([k for k in started if k[1] >= first]) >= 8, 10)
        stats = new.fleet.counters.as_stats()
    late = {k: at - k[1] for k, at in started.items() if k[1] >= first and at - k[1] >= 300}
    assert not late, f"a slot waited for a grace: {late}"
    assert stats["reads"] == 0, "no instance with its job set but itself: it contends for all"


@pytest.mark.slow
async def test_silent_instances_claim_the_slots_of_members_that_left() -> None:
    """Two members with the live instance's job set announce themselves once and die: with
    k=1 and one watcher, the slots they were contender and watcher of are silent for "live".
    It claims them once their ttl has run out (orphans), so no slot is lost or silent in the
    ledger; the others it decides at the slot or a grace after it."""
    store = MemoryStore.create("departures")
    s = Scheduler(
        store,
        instance="live",
        environ={},
        contenders=1,
        fleet_watchers=1,
        fleet_grace="200ms",
        fleet_refresh="200ms",
    )
    jobs = [f"j{j}" for j in range(8)]
    for job in jobs:
        s.add_job(lambda: None, "* * * * * *", name=job, max_late="5s")
    job_set = job_set_fingerprint(job_signature(spec) for spec in s.jobs.values())
    ghost_ttl_ms = 3_000

    async def decided(job: str, slot: int) -> RunRecord | None:
        done = (RunStatus.SUCCEEDED, RunStatus.SKIPPED)
        return next(
            (r for r in await store.history(job, 50) if r.slot == slot and r.status in done), None
        )

    async with s:
        assert s.fleet is not None
        await eventually(lambda: len(s.fleet.members) == 1 if s.fleet else False, 5)
        gone_at = s.store_clock.now_ms() + ghost_ttl_ms
        for ghost in ("g1", "g2"):
            await store.announce(ghost, ghost_ttl_ms, {"job_set": job_set})
        await eventually(lambda: len(s.fleet.members) == 3 if s.fleet else False, 5)
        first = s.store_clock.now_ms() // 1000 * 1000 + 1000
        slots = (first, first + 1000)
        silent = [
            (job, slot)
            for slot in slots
            for job in jobs
            if contenders(["g1", "g2", "live"], job, slot, 3)[-1] == "live"
        ]
        assert silent, "with 16 (job, slot)s, some rank live third"
        deadline = time.monotonic() + 15
        while True:  # every (job, slot) decided in the ledger, or the deadline
            records = {(job, slot): await decided(job, slot) for slot in slots for job in jobs}
            if all(records.values()) or time.monotonic() > deadline:
                break
            await asyncio.sleep(0.05)
        orphans = s.fleet.counters.orphans
        roles = {key: s.fleet.role(*key) for key in silent}
    assert all(records.values()), f"a slot left undecided: {records}"
    assert orphans >= len(silent)
    for key in silent:
        record = records[key]
        assert record is not None and record.claimed_at is not None
        assert record.claimed_at >= gone_at, f"{key} claimed before its contenders' ttl ran out"
    assert all(role is Role.CONTEND for role in roles.values()), "alone again: contends for all"
