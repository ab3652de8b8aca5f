"""The CPU one instance spends per slot deciding its roles (DESIGN section 12).

``python -m bench.fleet_roles [N] [J]``: with N live members and J jobs due at one slot, time
`Fleet.plan` (the rendezvous ranking of this instance for every job, stopping at the
(k + w)-th member ranked above it) and print ms per slot and the jobs this instance contends
for and watches."""

from __future__ import annotations

import sys
import time

from anarchon import MemoryStore, Scheduler


def main(members: int = 128, jobs: int = 10_000, repeat: int = 3) -> None:
    scheduler = Scheduler(MemoryStore.create(), instance="i000", environ={}, contenders=2)
    specs = [scheduler.add_job(lambda: None, "* * * * *", name=f"job{j}") for j in range(jobs)]
    fleet = scheduler.fleet
    assert fleet is not None
    fleet._peers = {f"i{n:03d}": 0 for n in range(members)}
    best = float("inf")
    for slot in range(repeat):
        started = time.perf_counter()
        plan = fleet.plan(specs, slot * 60_000)
        best = min(best, time.perf_counter() - started)
    print(
        f"N={members} J={jobs} k={fleet.k} w={fleet.w}: {best * 1000:.0f} ms per slot, "
        f"contends for {len(plan.now)} jobs, watches {len(plan.watch)}"
    )


if __name__ == "__main__":
    main(*(int(a) for a in sys.argv[1:3]))
