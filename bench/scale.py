"""Scale: many jobs due in the same slot, decided as the scheduler decides them (one
``claim_many`` where the store has it, else every claim at once): the time until every job of the
slot has a winner, on one instance (100 to 10,000 jobs) and on 4 instances (processes) at once.
Where the store prepares slots ahead (`SupportsPrepare`), the slot is prepared first, as the
scheduler does `prepare_ahead_ms` before it; that time is recorded apart (``prepared_s``)."""

from __future__ import annotations

import asyncio
import time
from typing import Any

from anarchon import SupportsClaimMany

from ._proc import _requests, claim_runs, prepare_slot, run_instances
from ._targets import Target

__all__ = ["measure_scale"]


async def measure_scale(
    target: Target, sizes: tuple[int, ...], instances: int, many: int
) -> dict[str, Any]:
    prefix = target.prefix("s")
    store = target.new_store(prefix)
    await store.open()
    biggest = max(*sizes, many)
    jobs = [f"s{j}" for j in range(biggest)]
    base = target.slot_base()
    curve: list[dict[str, Any]] = []
    bound = target.in_flight
    path = "claim_many" if isinstance(store, SupportsClaimMany) else "gather"
    result: dict[str, Any] = {
        "target": target.name,
        "curve": curve,
        "target_s": target.scale_target_s,
    }
    try:
        if bound is not None and not isinstance(store, SupportsClaimMany):
            # What the scheduler does (every claim at once) fails here: record it, then measure
            # with the claims bounded to what the driver accepts.
            probe = _requests([(j, base - 1) for j in jobs[:1000]], "bench:probe")
            answers = await asyncio.gather(*(store.claim(r) for r in probe), return_exceptions=True)
            await target.forget(prefix, [(r.job, r.slot) for r in probe])
            failed = [a for a in answers if isinstance(a, BaseException)]
            result["unbounded"] = (
                f"{len(failed)} of {len(probe)} claims sent at once failed: "
                f"{type(failed[0]).__name__}: {failed[0]}"
                if failed
                else "ok"
            )
            path = f"gather, <= {bound} in flight"
        else:
            bound = None
        if target.per_job_state:  # the jobs' rows or keys exist, as they do after one slot
            await claim_runs(store, _requests([(j, base) for j in jobs], "bench:warm"), True, bound)
        for n, size in enumerate(sizes, start=1):
            requests = _requests([(j, base + n) for j in jobs[:size]], "bench:one")
            prepared_s = await prepare_slot(store, jobs[:size], base + n)
            started = time.perf_counter()
            won = await claim_runs(store, requests, True, bound)
            elapsed = time.perf_counter() - started
            # A job not won by the only claimer is a failure of the slot (C4), not a time.
            point = {"jobs": size, "seconds": elapsed, "not_won": won.count(False)}
            if prepared_s is not None:
                point["prepared_s"] = prepared_s
            curve.append(point)
            await target.forget(prefix, [(r.job, r.slot) for r in requests])
    finally:
        await store.close()
    runs = [(j, base + len(sizes) + 1) for j in jobs[:many]]
    one = next((c["seconds"] for c in curve if c["jobs"] == many and not c["not_won"]), None)
    result.update(
        batch=path,
        one_instance_s=one,
        met=one is not None and one <= target.scale_target_s,
        instances=instances,
    )
    try:
        reports = await asyncio.to_thread(
            run_instances, target.url(prefix), runs, instances, True, bound
        )
    except RuntimeError as exc:
        result.update(instances_s=None, instances_exactly_one_winner=None, instances_error=str(exc))
        return result
    finally:
        await target.forget(prefix, runs)
    counts = [0] * many
    for report in reports:
        for i in report["won"]:
            counts[i] += 1
    together = max(r["ended"] for r in reports) - min(r["started"] for r in reports)
    result.update(
        instances_s=together,
        instances_exactly_one_winner=all(c == 1 for c in counts),
    )
    return result
