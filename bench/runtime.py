"""Runtime benchmark: slot -> job start latency and takeover time after kill -9, on SQLite.

    .venv/bin/python bench/runtime.py [--slots 300] [--instances 3] [--quick]

Three scheduler processes share one SQLite file and a secondly job that records when it started.
Prints p50 / p99 of (job start - slot) and the takeover time after `kill -9` of a winner, as a
ratio to the lease + heartbeat bound, and writes bench/results/runtime.json.
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import sqlite3
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

WORKER = """
import os, sqlite3, sys, time, asyncio, anarchon
store_db, runs_db, mode = sys.argv[1:4]
s = anarchon.Scheduler(
    f"sqlite:///{store_db}", instance=f"pid-{os.getpid()}", grace="200ms", environ={}
)
def record(slot, attempt):
    db = sqlite3.connect(runs_db, timeout=30, isolation_level=None)
    db.execute("CREATE TABLE IF NOT EXISTS runs (slot INT, attempt INT, pid INT, at REAL)")
    db.execute("INSERT INTO runs VALUES (?,?,?,?)", (slot, attempt, os.getpid(), time.time()))
    db.close()
if mode == "tick":
    @s.job("* * * * * *", name="tick", max_late="5s", overlap="allow")
    async def tick(run):
        started = time.time()
        db = sqlite3.connect(runs_db, timeout=30, isolation_level=None)
        db.execute("CREATE TABLE IF NOT EXISTS runs (slot INT, attempt INT, pid INT, at REAL)")
        db.execute("INSERT INTO runs VALUES (?,?,?,?)", (run.slot, run.attempt, os.getpid(), started))
        db.close()
else:
    @s.job("* * * * * *", name="long", lease="1500ms", heartbeat="500ms", max_late="30s")
    async def long(run):
        record(run.slot, run.attempt)
        await asyncio.sleep(60)
print("ready", flush=True)
s.run()
"""


def start(tmp: Path, mode: str, n: int) -> list[subprocess.Popen[str]]:
    script = tmp / "worker.py"
    script.write_text(WORKER)
    procs = [
        subprocess.Popen(
            [
                sys.executable,
                str(script),
                str(tmp / f"{mode}.db"),
                str(tmp / f"{mode}-runs.db"),
                mode,
            ],
            stdout=subprocess.PIPE,
            stderr=subprocess.DEVNULL,
            text=True,
        )
        for _ in range(n)
    ]
    for p in procs:
        assert p.stdout is not None and p.stdout.readline().strip() == "ready"
    return procs


def rows(path: Path, where: str = "1=1") -> list[tuple[int, int, int, float]]:
    if not path.exists():
        return []
    db = sqlite3.connect(path, timeout=30)
    try:
        return list(db.execute(f"SELECT slot, attempt, pid, at FROM runs WHERE {where}"))
    except sqlite3.OperationalError:
        return []
    finally:
        db.close()


def stop(procs: list[subprocess.Popen[str]]) -> None:
    for p in procs:
        if p.poll() is None:
            p.send_signal(signal.SIGTERM)
    for p in procs:
        p.wait(30)


def wait(condition, timeout: float) -> None:  # type: ignore[no-untyped-def]
    deadline = time.monotonic() + timeout
    while not condition():
        if time.monotonic() > deadline:
            raise SystemExit("benchmark timed out")
        time.sleep(0.05)


def precision(tmp: Path, slots: int, instances: int) -> dict[str, float]:
    procs = start(tmp, "tick", instances)
    runs = tmp / "tick-runs.db"
    try:
        wait(lambda: len(rows(runs)) >= slots + 2, slots * 2 + 30)
    finally:
        stop(procs)
    ordered = sorted(rows(runs))[2:]  # the first slots may be catch-up claims at start
    delays = sorted((at * 1000 - slot) for slot, _, _, at in ordered)
    return {
        "slots": len(delays),
        "p50_ms": statistics.median(delays),
        "p99_ms": delays[min(len(delays) - 1, int(len(delays) * 0.99))],
        "max_ms": delays[-1],
        "min_ms": delays[0],
    }


def takeover(tmp: Path, rounds: int) -> dict[str, float]:
    times = []
    for i in range(rounds):
        sub = tmp / f"takeover-{i}"
        sub.mkdir()
        procs = start(sub, "long", 2)
        runs = sub / "long-runs.db"
        try:
            wait(lambda runs=runs: bool(rows(runs)), 30)
            slot, _, winner, _ = rows(runs)[0]
            killed = time.time()
            os.kill(winner, signal.SIGKILL)
            done = f"slot = {slot} AND attempt = 2"
            wait(lambda runs=runs, done=done: bool(rows(runs, done)), 30)
            times.append((rows(runs, f"slot = {slot} AND attempt = 2")[0][3] - killed) * 1000)
        finally:
            stop(procs)
    bound = 1500 + 500
    return {
        "rounds": rounds,
        "median_ms": statistics.median(times),
        "max_ms": max(times),
        "bound_ms": bound,
        "max_over_bound": max(times) / bound,
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--slots", type=int, default=300)
    parser.add_argument("--instances", type=int, default=3)
    parser.add_argument("--takeovers", type=int, default=5)
    parser.add_argument("--quick", action="store_true", help="20 slots, 1 takeover (smoke)")
    args = parser.parse_args()
    if args.quick:
        args.slots, args.takeovers = 20, 1
    with tempfile.TemporaryDirectory() as folder:
        tmp = Path(folder)
        result = {
            "precision": precision(tmp, args.slots, args.instances),
            "takeover": takeover(tmp, args.takeovers),
        }
    p, t = result["precision"], result["takeover"]
    print(f"slot -> job start over {p['slots']} slots, {args.instances} instances on SQLite:")
    print(f"  p50 {p['p50_ms']:.1f} ms, p99 {p['p99_ms']:.1f} ms, max {p['max_ms']:.1f} ms")
    print(f"takeover after kill -9 over {t['rounds']} rounds (lease 1500 ms, heartbeat 500 ms):")
    print(
        f"  median {t['median_ms']:.0f} ms, max {t['max_ms']:.0f} ms = "
        f"{t['max_over_bound']:.2f}x of lease + heartbeat"
    )
    out = Path(__file__).with_name("results")
    out.mkdir(exist_ok=True)
    if not args.quick:
        (out / "runtime.json").write_text(json.dumps(result, indent=2) + "\n")


if __name__ == "__main__":
    main()
