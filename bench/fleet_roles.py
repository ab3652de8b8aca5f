"""The CPU one instance spends per slot deciding its roles (DESIGN section 12).

``python -m bench.fleet_roles [N] [J]``: with N live members and J jobs due at one slot, time
`Fleet.split` (the rendezvous ranking of this instance for every job, stopping at the k-th
member ranked above it) and print ms per slot and the jobs this instance contends for."""

from __future__ import annotations

import sys
import time

from anarchon import MemoryStore, Scheduler


def main(members: int = 128, jobs: int = 10_000, repeat: int = 3) -> None:
    scheduler = Scheduler(MemoryStore.create(), instance="i000", environ={}, contenders=2)
    specs = [scheduler.add_job(lambda: None, "* * * * *", name=f"job{j}") for j in range(jobs)]
    fleet = scheduler.fleet
    assert fleet is not None
    fleet._names = frozenset(f"i{n:03d}" for n in range(members))
    best = float("inf")
    for slot in range(repeat):
        started = time.perf_counter()
        mine, _ = fleet.split(specs, slot * 60_000)
        best = min(best, time.perf_counter() - started)
    print(f"N={members} J={jobs} k=2: {best * 1000:.0f} ms per slot, contends for {len(mine)} jobs")


if __name__ == "__main__":
    main(*(int(a) for a in sys.argv[1:3]))
