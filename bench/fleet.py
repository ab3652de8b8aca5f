"""Fleet scale (issue 25): N instances deciding J jobs of one slot, every instance claiming
(today) against only k contenders per (job, slot) with a grace fallback (DESIGN section 12).

N instances (1 to 128) are simulated by a few worker processes, each holding many instances on a
few store clients (`CLIENTS` in all: one connection per instance would measure the machine's
connection handling, not the protocol). Every backend runs on a private server (see
`_fleet_servers`), so its operations and CPU are the benchmark's alone. Per run it records the
server's operations and CPU per decided run, the time until every job of the slot has a winner,
and every job's winners (duplicates and undecided jobs are counted, never assumed away).

Fallback modes of the non-contenders after the grace:

- ``check``: DESIGN section 12 as written. Each reads every job it did not contend, one call
  per job (`LeaseStore.check`; NATS: one message get per run), and claims what is undecided.
- ``batch``: the same reads as one ``claim_many`` (the claim step reads first: a decided run
  answers lost/running without a write; NATS publishes a duplicate and reads it back).
- ``live``: each re-reads the member list and falls back only for jobs whose k contenders have
  all left it (the benchmark's dead instances, as if their heartbeat TTL had run out by then).
- ``tiers``: what the runtime does (`anarchon._runtime.fleet`): the k contenders claim at the
  slot, the next `WATCHERS` in the ranking (the watchers) claim after the grace in one
  ``claim_many``, and the rest claim only jobs whose contenders and watchers all left the list.
  In the kill phase the watchers decide the dead contenders' slots, as a killed instance stays
  listed until its ttl runs out.

``python -m bench --only fleet`` runs this phase alone (``--only fleet,redis`` one backend).
"""

from __future__ import annotations

import math
import multiprocessing
import signal
import statistics
import time
from pathlib import Path
from typing import Any

from anarchon import SupportsMembership, create_store
from anarchon.backend import contenders

from . import _fleet_worker
from ._fleet_servers import Probe, start_probe

__all__ = ["FLEET_TARGETS", "FULL", "QUICK", "measure_fleet"]

FLEET_TARGETS = (
    ("redis/lease", "redis", "lease"),
    ("postgres", "postgres", ""),
    ("sqlite", "sqlite", ""),
    ("nats", "nats", "msg-id"),
    ("redis/idmp", "redis", "idmp"),
)
PROCESSES = 2
CLIENTS = 16
"""Store clients in all (split over the processes); instances share them round-robin."""
GRACE_S = 0.25

FULL: dict[str, Any] = {
    "fleet_sizes": (1, 4, 16, 64, 128),
    "fleet_jobs": (100, 1_000, 10_000),
    "fleet_kill_sizes": (4, 16, 128),
    "fleet_kill_jobs": (100, 1_000),
    "fleet_budget": 200_000,
    "fleet_check_budget": 50_000,
}
QUICK: dict[str, Any] = {
    "fleet_sizes": (4,),
    "fleet_jobs": (100,),
    "fleet_kill_sizes": (4,),
    "fleet_kill_jobs": (100,),
    "fleet_budget": 20_000,
    "fleet_check_budget": 2_000,
}
MODES = (
    ("everyone", None, "batch"),
    ("k2-check", 2, "check"),
    ("k2-batch", 2, "batch"),
    ("k2-live", 2, "live"),
    ("k2-w1", 2, "tiers"),
    ("k1-w1", 1, "tiers"),
)
"""(name, k (None: k = N, today's behaviour), fallback)."""
WATCHERS = 1
"""Watchers per (job, slot) in the ``tiers`` mode (the runtime's default `fleet_watchers`)."""


def _url(backend: str, strategy: str, base: str, prefix: str) -> str:
    if backend == "redis":  # a minute: a client starved by 64 instances connects late
        return f"{base}?strategy={strategy}&prefix={prefix}&timeout_ms=60000"
    if backend == "postgres":
        return f"{base}?schema=fleet&prefix={prefix}&pool_max_size={_fleet_worker.IN_FLIGHT}"
    if backend == "nats":  # as for Redis: a starved client connects late
        return f"{base}?strategy={strategy}&prefix={prefix}&timeout_ms=60000"
    return f"{base}?prefix={prefix}&busy_timeout_ms=60000"  # 16 connections share the file


class Pool:
    """`PROCESSES` worker processes, kept for a backend's runs (spawning per run would cost
    seconds each), released together by four barriers shared with this process: ready (set
    up), go, done (claimed), measured (the server's counters read: only then may the workers
    close their connections, whose PostgreSQL backends take their CPU counts with them)."""

    def __init__(self) -> None:
        ctx = multiprocessing.get_context("spawn")
        self.barriers = tuple(ctx.Barrier(PROCESSES + 1) for _ in range(4))
        self.out: Any = ctx.Queue()
        self.inboxes: list[Any] = [ctx.Queue() for _ in range(PROCESSES)]
        self.procs = [
            ctx.Process(target=_fleet_worker.main, args=(q, self.barriers, self.out))
            for q in self.inboxes
        ]
        for p in self.procs:
            p.start()

    def run(self, plans: list[dict[str, Any]], probe: Probe) -> tuple[list[Any], dict[str, float]]:
        """Run one plan per process; returns their reports and the server's counters' deltas."""
        ready, go, done, measured = self.barriers
        for inbox, plan in zip(self.inboxes, plans, strict=True):
            inbox.put(plan)
        probe.reset()
        try:
            ready.wait(300)
            before = probe.snapshot()
            go.wait(300)
            done.wait(600)
            after = probe.snapshot()
            measured.wait(60)
        except Exception:  # noqa: BLE001 - a worker's error explains it: read it below
            reports = [self.out.get(timeout=60) for _ in plans]
            errors = [r["error"] for r in reports if "error" in r]
            raise RuntimeError("a worker failed: " + "; ".join(errors)) from None
        reports = [self.out.get(timeout=60) for _ in plans]
        errors = [r["error"] for r in reports if "error" in r]
        if errors:
            raise RuntimeError("a worker failed: " + "; ".join(errors))
        return reports, {k: after[k] - before[k] for k in before}

    def close(self) -> None:
        for inbox in self.inboxes:
            inbox.put(None)
        for p in self.procs:
            p.join(30)
            if p.is_alive():
                p.terminate()


class Slots:
    """A new slot per run: epoch ms a second in the past, strictly growing."""

    def __init__(self) -> None:
        self.last = 0

    def next(self) -> int:
        self.last = max(self.last + 1, time.time_ns() // 1_000_000 - 1_000)
        return self.last


def _over(params: dict[str, Any], n: int, jobs: int, mode: tuple[Any, ...]) -> int | None:
    """The store requests (claims and reads) a run would make, if over the profile's budget
    (``check`` sends one call per job: the client's time, not the store's, would be measured)."""
    _, k, fallback = mode
    if k is not None and fallback in ("live", "tiers"):
        work = min(k + (WATCHERS if fallback == "tiers" else 0), n) * jobs
    else:
        work = n * jobs
    budget = params["fleet_check_budget" if fallback == "check" else "fleet_budget"]
    return work if work > budget else None


def run_cell(
    pool: Pool, probe: Probe, base: dict[str, Any], n: int, jobs: int, mode: tuple[Any, ...],
    slot: int, kill: bool,
) -> dict[str, Any]:  # fmt: skip
    name, k, fallback = mode
    k = n if k is None else min(k, n)
    members = [f"m{i:03d}" for i in range(n)]
    names = [f"j{i}" for i in range(jobs)]
    dead = contenders(members, names[0], slot, k) if kill else []
    clients = max(1, min(n, CLIENTS) // PROCESSES)
    plans = [
        dict(base, members=members, local=members[p::PROCESSES], dead=dead, jobs=names,
             slot=slot, k=k, watchers=WATCHERS, grace_s=GRACE_S, fallback=fallback,
             clients=clients if members[p::PROCESSES] else 0)
        for p in range(PROCESSES)
    ]  # fmt: skip
    reports, server = pool.run(plans, probe)
    t0 = min(r["t0"] for r in reports)
    first: dict[str, float] = {}
    winners: dict[str, int] = dict.fromkeys(names, 0)
    calls = claimed = read = 0
    contend: list[float] = []
    for report in reports:
        for inst in report["instances"]:
            calls += inst["calls"]
            claimed += inst["claimed"]
            read += inst["read"]
            if inst["contend_s"] is not None:
                contend.append(inst["contend_s"])
            for job, at in inst["won"]:
                winners[job] += 1
                first[job] = min(first.get(job, math.inf), at)
    client_cpu = sum(r["cpu_s"] for r in reports)
    sqlite = base["backend"] == "sqlite"
    ops = float(calls) if sqlite else server["ops"]
    cpu = client_cpu if sqlite else server["cpu_s"]
    decided = [j for j in names if winners[j]]
    row: dict[str, Any] = {
        "mode": name,
        "instances": n,
        "jobs": jobs,
        "k": k,
        "fallback": fallback if k < n else None,
        "kill": kill,
        "processes": PROCESSES,
        "clients": clients * PROCESSES if n >= PROCESSES else clients,
        "decided_s": round(max(first.values()) - t0, 4) if first else None,
        "duplicates": sum(1 for j in names if winners[j] > 1),
        "undecided": jobs - len(decided),
        "claims": claimed,
        "reads": read,
        "calls": calls,
        "ops": ops,
        "ops_per_run": round(ops / max(1, len(decided)), 4),
        "cpu_s": round(cpu, 3),
        "cpu_us_per_run": round(cpu * 1e6 / max(1, len(decided)), 1),
        "client_cpu_s": round(client_cpu, 3),
        "contend_rtt_s": round(statistics.median(contend), 4) if contend else None,
    }
    if kill:
        orphans = [j for j in names if set(contenders(members, j, slot, k)) <= set(dead)]
        times = [first[j] - t0 for j in orphans if j in first]
        row["orphans"] = len(orphans)
        row["orphans_decided_s"] = round(max(times), 4) if len(times) == len(orphans) else None
        row["grace_s"] = GRACE_S
    return row


HEARTBEAT_ROUNDS = 3
"""Refresh rounds measured per fleet size (the median is kept)."""


async def _heartbeat(url: str, sizes: tuple[int, ...], probe: Probe) -> dict[str, Any]:
    """What one refresh of the whole fleet costs the store (M1): each of N members announces
    itself and reads the member list, as `Fleet.beat` does; server operations and CPU per
    refresh, and the client's seconds (one client, sequential: an upper bound)."""
    store = create_store(url)
    await store.open()
    try:
        if not isinstance(store, SupportsMembership):
            return {"todo": "the store has no SupportsMembership (M1)"}
        rows = []
        for n in sizes:
            rounds = []
            for _ in range(HEARTBEAT_ROUNDS):
                before = probe.snapshot()
                started = time.perf_counter()
                for i in range(n):
                    await store.announce(f"hb{i:03d}", 15_000, {"wins": i, "job_set": 7})
                    seen = len(await store.members())
                elapsed = time.perf_counter() - started
                after = probe.snapshot()
                rounds.append((after["cpu_s"] - before["cpu_s"], after["ops"] - before["ops"],
                               elapsed, seen))  # fmt: skip
            cpu, ops, elapsed, seen = sorted(rounds)[len(rounds) // 2]
            rows.append(
                {
                    "instances": n,
                    "members_seen": seen,
                    "ops_per_refresh": ops,
                    "cpu_ms_per_refresh": round(cpu * 1000, 2),
                    "seconds": round(elapsed, 4),
                }
            )
            for i in range(n):
                await store.leave(f"hb{i:03d}")
        return {"rows": rows}
    finally:
        await store.close()


async def measure_target(
    pool: Pool, name: str, backend: str, strategy: str, params: dict[str, Any], tmp: Path
) -> dict[str, Any]:
    """Every run of one backend: the grid within the budget, then the kill phase."""
    probe = start_probe(backend, strategy, tmp)
    slots = Slots()
    base = {"url": _url(backend, strategy, probe.url, "fleet"), "backend": backend}
    rows: list[dict[str, Any]] = []
    skipped: list[dict[str, Any]] = []
    result: dict[str, Any] = {
        "target": name,
        "ops_meaning": probe.ops_meaning,
        "cpu_meaning": probe.cpu_meaning,
        "rows": rows,
        "over_budget": skipped,
    }
    try:
        biggest = max(*params["fleet_jobs"], *params["fleet_kill_jobs"])
        # The jobs' rows or keys exist, as after a first slot.
        run_cell(pool, probe, base, 1, biggest, MODES[0], slots.next(), False)
        for jobs in params["fleet_jobs"]:
            for n in params["fleet_sizes"]:
                for mode in MODES if n > 1 else MODES[:1]:
                    work = _over(params, n, jobs, mode)
                    if work is not None:
                        skipped.append({"mode": mode[0], "instances": n, "jobs": jobs,
                                        "requests": work})  # fmt: skip
                        continue
                    rows.append(run_cell(pool, probe, base, n, jobs, mode, slots.next(), False))
                    print(f"  {_line(rows[-1])}", flush=True)
        for jobs in params["fleet_kill_jobs"]:
            for n in params["fleet_kill_sizes"]:
                for mode in MODES[1:]:
                    if _over(params, n, jobs, mode) is not None:
                        continue
                    rows.append(run_cell(pool, probe, base, n, jobs, mode, slots.next(), True))
                    print(f"  {_line(rows[-1])}", flush=True)
        result["heartbeat"] = await _heartbeat(
            _url(backend, strategy, probe.url, "fleethb"), params["fleet_sizes"], probe
        )
    finally:
        probe.stop()
    return result


def _line(r: dict[str, Any]) -> str:
    kill = f" kill: {r['orphans']} orphans decided {r['orphans_decided_s']} s" if r["kill"] else ""
    return (
        f"{r['mode']:9} N={r['instances']:<4} J={r['jobs']:<6} decided {r['decided_s']} s, "
        f"{r['ops_per_run']} ops/run, {r['cpu_us_per_run']} us CPU/run, "
        f"dup {r['duplicates']}, undecided {r['undecided']}{kill}"
    )


async def measure_fleet(
    selected: list[tuple[str, str, str]], params: dict[str, Any], tmp: Path
) -> dict[str, Any]:
    """The fleet phase over the `selected` (name, backend, strategy) targets."""
    out: dict[str, Any] = {
        "grace_s": GRACE_S,
        "processes": PROCESSES,
        "clients": CLIENTS,
        "targets": [],
        "skipped": {},
        "errors": {},
    }

    def stop(signum: int, frame: object) -> None:
        raise KeyboardInterrupt  # the private servers are stopped on the way out

    signal.signal(signal.SIGTERM, stop)
    pool = Pool()
    try:
        for name, backend, strategy in selected:
            print(f"[{name} fleet]", flush=True)
            try:
                out["targets"].append(
                    await measure_target(pool, name, backend, strategy, params, tmp)
                )
            except RuntimeError as exc:
                print(f"  {name}: {exc}", flush=True)
                missing = "not installed" in str(exc) or "not found" in str(exc)
                out["skipped" if missing else "errors"][name] = str(exc)
                if not missing:  # its barriers may be broken: a new pool for the next
                    pool.close()
                    pool = Pool()
    finally:
        pool.close()
    return out
