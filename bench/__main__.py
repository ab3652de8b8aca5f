"""``python -m bench [--quick] [--only NAMES] [--skip NAMES]``: the whole suite in one run.

NAMES are comma-separated backends (sqlite, postgres, redis, nats, rabbitmq), targets
(redis/idmp, nats/expected-seq, ...) or phases (latency, contention, scale, runtime, peers,
fleet). The fleet phase (`bench/fleet.py`) runs on private servers of its own and, run alone
(``--only fleet``), writes ``fleet.json`` instead of ``bench.json``.
A backend whose package is not importable or whose server does not answer is skipped with the
reason. Writes ``bench/results/bench.json`` and the plots in ``docs/assets/bench/`` (``--quick``:
both into ``bench/results/quick/``, which git ignores).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import platform
import sys
import tempfile
import time
import traceback
from pathlib import Path
from typing import Any

from . import fleet, runtime
from ._targets import ALL_BACKENDS, Env, Target, make_targets
from .contention import measure_contention
from .latency import measure_latency
from .peers import measure_peers
from .plots import plot
from .report import print_report
from .scale import measure_scale

PHASES = ("latency", "contention", "scale", "runtime", "peers", "fleet")
ROOT = Path(__file__).resolve().parent.parent

FULL: dict[str, Any] = {
    "latency_calls": 2000,
    "latency_rounds": 5,
    "contention_slots": 10,
    "scale_sizes": (100, 1000, 10_000),
    "scale_many": 10_000,
    "runtime_slots": 40,
    "runtime_takeovers": 3,
    "memory_jobs": (1_000, 10_000),
    "peer_calls": 500,
    **fleet.FULL,
}
QUICK: dict[str, Any] = {
    "latency_calls": 200,
    "latency_rounds": 2,
    "contention_slots": 3,
    "scale_sizes": (100, 1000),
    "scale_many": 1000,
    "runtime_slots": 3,
    "runtime_takeovers": 1,
    "memory_jobs": (100, 1_000),
    "peer_calls": 100,
    **fleet.QUICK,
}


def _names(text: str | None) -> set[str]:
    return {n.strip() for n in (text or "").split(",") if n.strip()}


def _selected(name: str, backend: str, only: set[str], skip: set[str]) -> bool:
    keys = {name, backend}
    named = only - set(PHASES)
    if named and not keys & named:
        return False
    return not keys & skip


class _Phase:
    """Prints the phase and records its duration in ``meta.timings``."""

    def __init__(self, results: dict[str, Any], name: str) -> None:
        self.timings: dict[str, float] = results["meta"]["timings"]
        self.name = name

    def __enter__(self) -> None:
        print(f"[{self.name}]", flush=True)
        self.started = time.monotonic()

    def __exit__(self, *exc: object) -> None:
        self.timings[self.name] = round(time.monotonic() - self.started, 2)


async def _run_target(
    target: Target, phases: set[str], p: dict[str, Any], results: dict[str, Any]
) -> None:
    await target.setup()
    try:
        if "latency" in phases:
            with _Phase(results, f"{target.name} latency"):
                results["latency"].append(
                    await measure_latency(target, p["latency_calls"], p["latency_rounds"])
                )
        if "peers" in phases and target.name in ("postgres", "redis/lease"):
            with _Phase(results, f"{target.name} peers"):
                results["_peer_targets"][target.name] = target
                peers = await measure_peers({target.name: target}, p["peer_calls"])
                results["peers"]["rows"] += peers["rows"]
                results["peers"]["skipped"].update(
                    {k: v for k, v in peers["skipped"].items() if k == "apscheduler"}
                )
        if "contention" in phases:
            with _Phase(results, f"{target.name} contention"):
                results["contention"].append(
                    await measure_contention(target, p["contention_slots"])
                )
        if "scale" in phases:
            with _Phase(results, f"{target.name} scale"):
                results["scale"].append(
                    await measure_scale(target, p["scale_sizes"], 4, p["scale_many"])
                )
    finally:
        await target.teardown()


async def run(args: argparse.Namespace) -> dict[str, Any]:
    params = QUICK if args.quick else FULL
    only, skip = _names(args.only), _names(args.skip)
    unknown = (only | skip) - set(PHASES) - set(ALL_BACKENDS)
    phases = set(PHASES) - skip
    if only & set(PHASES):
        phases &= only
    started = time.monotonic()
    results: dict[str, Any] = {
        "meta": {
            "mode": "quick" if args.quick else "full",
            "started": time.strftime("%Y-%m-%dT%H:%M:%S%z"),
            "load_before": [round(x, 2) for x in os.getloadavg()],
            "cpus": os.cpu_count(),
            "python": platform.python_version(),
            "platform": platform.platform(),
            "timings": {},
            "params": {k: list(v) if isinstance(v, tuple) else v for k, v in params.items()},
        },
        "skipped": {},
        "errors": {},
        "latency": [],
        "contention": [],
        "scale": [],
        "peers": {"calls_per_kind": params["peer_calls"], "rows": [], "skipped": {}},
        "_peer_targets": {},
    }
    with tempfile.TemporaryDirectory(prefix="anarchon-bench-") as tmp:
        env = Env(Path(tmp))
        targets = make_targets(env)
        names = {t.name for t in targets}
        if unknown - names:
            raise SystemExit(f"unknown names: {', '.join(sorted(unknown - names))}")
        for target in targets:
            if not _selected(target.name, target.backend, only, skip):
                continue
            reason = target.unavailable()
            if reason:
                print(f"[{target.name}] skipped: {reason}", flush=True)
                results["skipped"][target.name] = reason
                continue
            if not phases - {"runtime", "fleet"}:
                continue
            try:
                await _run_target(target, phases, params, results)
            except Exception as exc:  # noqa: BLE001 - one backend's failure is reported, not fatal
                traceback.print_exc()
                results["errors"][target.name] = f"{type(exc).__name__}: {exc}"
        if "fleet" in phases:
            chosen = [t for t in fleet.FLEET_TARGETS if _selected(t[0], t[1], only, skip)]
            with _Phase(results, "fleet"):
                results["fleet"] = await fleet.measure_fleet(chosen, params, Path(tmp))
            results["errors"].update(
                {f"{k} fleet": v for k, v in results["fleet"]["errors"].items()}
            )
    if "runtime" in phases:
        with _Phase(results, "runtime: slot -> start, takeover after kill -9, memory"):
            try:
                results["runtime"] = await asyncio.to_thread(
                    runtime.measure,
                    params["runtime_slots"],
                    3,
                    params["runtime_takeovers"],
                    params["memory_jobs"],
                )
            except Exception as exc:  # noqa: BLE001 - reported with the other results
                traceback.print_exc()
                results["errors"]["runtime"] = f"{type(exc).__name__}: {exc}"
    if "peers" in phases:
        for name in ("postgres", "redis/lease"):
            if name not in results["_peer_targets"] and name not in results["skipped"]:
                results["peers"]["skipped"][name] = "not selected"
    del results["_peer_targets"]
    results["meta"]["seconds"] = time.monotonic() - started
    results["meta"]["load_after"] = [round(x, 2) for x in os.getloadavg()]
    return results


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench", description=__doc__.split("\n\n")[0])
    parser.add_argument("--quick", action="store_true", help="few calls: a smoke check (CI)")
    parser.add_argument("--only", help="comma-separated backends, targets or phases to run")
    parser.add_argument("--skip", help="comma-separated backends, targets or phases to leave out")
    parser.add_argument("--out", type=Path, help="folder of the JSON (and of the plots if quick)")
    parser.add_argument(
        "--name", help="the JSON's file name without .json (default: bench; fleet if alone)"
    )
    args = parser.parse_args(argv)
    if args.name is None:
        alone = _names(args.only) & set(PHASES) == {"fleet"}
        args.name = "fleet" if alone else "bench"
    results = asyncio.run(run(args))
    out = args.out or ROOT / "bench" / "results" / ("quick" if args.quick else "")
    out.mkdir(parents=True, exist_ok=True)
    path = out / f"{args.name}.json"
    path.write_text(json.dumps(results, indent=2) + "\n")
    images = ROOT / "docs" / "assets" / "bench" if not args.quick and not args.out else out
    written = plot(results, images)
    print_report(results)
    print(f"results: {path}" + "".join(f"\nplot: {p}" for p in written))
    for name, error in results["errors"].items():
        print(f"ERROR {name}: {error}", file=sys.stderr)
    return 1 if results["errors"] else 0


if __name__ == "__main__":
    sys.exit(main())
