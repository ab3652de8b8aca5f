"""``python -m bench.ab``: the same benchmark selection on two checkouts, run alternately.

An A/B comparison that stays fair on a machine other work is loading: each step of the plan (one
target's latency, peers, contention and scale, or the runtime part) runs on the old checkout and
on the new one right after each other, in an order that flips from step to step and from round to
round, so a change of load between two steps falls on both sides alike. Each checkout runs its
own ``python -m bench`` with its own interpreter (a virtualenv synced from that checkout:
``UV_PROJECT_ENVIRONMENT=/tmp/venv-old uv sync --all-packages --locked --no-default-groups
--group bench``).

    python -m bench.ab --old /tmp/bench-old --old-python /tmp/venv-old/bin/python \\
        --new . --new-python /tmp/venv-new/bin/python --rounds 5 --raw /tmp/ab

writes every run's JSON into ``--raw``, then the comparison into ``--out``
(``bench/results/ab.json``) and prints it as Markdown tables: each measure's median over the
rounds for both sides, the rounds' range (the noise), new / old, and whether the two ranges are
apart (a difference beyond noise). ``--summarize`` rebuilds the comparison from ``--raw`` alone.
Needs only the standard library.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import time
from collections import defaultdict
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from .ab_tables import tables

SIDES = ("old", "new")
TARGETS = (
    "sqlite",
    "postgres",
    "redis/lease",
    "redis/stream-id",
    "redis/script",
    "nats/msg-id",
    "nats/expected-seq",
)
PLAN: list[list[str]] = [
    *(["--only", target, "--skip", "runtime"] for target in TARGETS),
    # RabbitMQ's full scale phase prepares 10,000 queues three times (about a minute alone):
    # its latency and contention run full, its scale at --quick sizes (100 and 1,000 jobs).
    ["--only", "rabbitmq", "--skip", "runtime,scale"],
    ["--quick", "--only", "rabbitmq,scale"],
    ["--only", "runtime"],
]
"""One step per line: the arguments of ``python -m bench``."""
ROOT = Path(__file__).resolve().parent.parent

Values = dict[str, list[float]]


def _commit(tree: Path) -> str:
    def git(*args: str) -> str:
        return subprocess.run(
            ["git", "-C", str(tree), *args], capture_output=True, text=True, check=False
        ).stdout.strip()

    dirty = git("status", "--porcelain", "--untracked-files=no")
    return git("rev-parse", "--short", "HEAD") + (" + uncommitted changes" if dirty else "")


def run_plan(args: argparse.Namespace) -> None:
    trees = {"old": (args.old, args.old_python), "new": (args.new, args.new_python)}
    args.raw.mkdir(parents=True, exist_ok=True)
    steps = PLAN[: args.steps] if args.steps else PLAN
    meta = {
        "started": time.strftime("%Y-%m-%dT%H:%M:%S%z"),
        "rounds": args.rounds,
        "plan": [" ".join(step) for step in steps],
        "trees": {side: {"path": str(t), "commit": _commit(t)} for side, (t, _) in trees.items()},
    }
    (args.raw / "plan.json").write_text(json.dumps(meta, indent=2) + "\n")
    for r in range(args.rounds):
        for s, step in enumerate(steps):
            order = SIDES if (r + s) % 2 == 0 else SIDES[::-1]
            for side in order:
                tree, python = trees[side]
                name = f"{side}-r{r}-s{s}"
                out = args.raw / f"{name}.log"
                command = [
                    str(python),
                    "-m",
                    "bench",
                    *step,
                    "--out",
                    str(args.raw),
                    "--name",
                    name,
                ]
                print(f"round {r + 1}/{args.rounds} step {s + 1}/{len(steps)} {side}: "
                      f"{' '.join(step)}", flush=True)  # fmt: skip
                started = time.monotonic()
                with out.open("w") as log:
                    done = subprocess.run(
                        command, cwd=tree, stdout=log, stderr=subprocess.STDOUT, check=False
                    )
                print(f"  {time.monotonic() - started:.0f} s, exit {done.returncode}", flush=True)


def _runs(raw: Path) -> Iterator[tuple[str, int, dict[str, Any]]]:
    for path in sorted(raw.glob("*-r*-s*.json")):
        side, r, _ = path.stem.split("-")
        yield side, int(r[1:]), json.loads(path.read_text())


def measures(result: dict[str, Any]) -> dict[str, float]:
    """The comparable numbers of one run, by name (``section|target|measure``)."""
    found: dict[str, float] = {}
    quick = result["meta"]["mode"] == "quick"
    for row in result["latency"]:
        t = row["target"]
        found[f"latency|{t}|won / floor"] = row["won"]["median_ratio"]
        found[f"latency|{t}|lost / floor"] = row["lost"]["median_ratio"]
        found[f"latency|{t}|floor us"] = row["floor"]["median_us"]
    for row in result["contention"]:
        by = {(c["kind"], c["claimers"]): c for c in row["rows"]}
        two = by[("tasks", 2)]["claims_per_s"]
        found[f"contention|{row['target']}|2 tasks claims/s"] = two
        found[f"contention|{row['target']}|32 tasks / 2"] = by[("tasks", 32)]["claims_per_s"] / two
        found[f"contention|{row['target']}|one winner"] = float(
            all(c["exactly_one_winner"] for c in row["rows"])
        )
    for row in result["scale"]:
        t = row["target"] + (" (quick sizes)" if quick else "")
        for point in row["curve"]:
            found[f"scale|{t}|{point['jobs']} jobs s"] = point["seconds"]
        found[f"scale|{t}|{row['curve'][-1]['jobs']} jobs, 4 instances s"] = row["instances_s"]
        found[f"scale|{t}|one winner"] = float(
            row["instances_exactly_one_winner"] and all(p["not_won"] == 0 for p in row["curve"])
        )
    for row in result["peers"]["rows"]:
        found[f"peers|{row['store']}|{row['peer']} / {row['compared_to']}"] = row["median_ratio"]
    runtime = result.get("runtime")
    if runtime:
        found["runtime|sqlite|slot to start p50 ms"] = runtime["precision"]["p50_ms"]
        found["runtime|sqlite|slot to start p99 ms"] = runtime["precision"]["p99_ms"]
        found["runtime|sqlite|takeover median ms"] = runtime["takeover"]["median_ms"]
        found["runtime|memory|KiB per 1,000 jobs (tracemalloc)"] = runtime["memory"][
            "traced_kib_per_1000_jobs"
        ]
        found["runtime|memory|KiB per 1,000 jobs (RSS)"] = runtime["memory"][
            "rss_kib_per_1000_jobs"
        ]
    return found


def summarize(raw: Path) -> dict[str, Any]:
    values: dict[str, Values] = {side: defaultdict(list) for side in SIDES}
    loads: dict[str, list[float]] = {side: [] for side in SIDES}
    errors: dict[str, list[str]] = {side: [] for side in SIDES}
    skipped: dict[str, str] = {}
    for side, r, result in _runs(raw):
        loads[side].append(result["meta"]["load_before"][0])
        errors[side] += [f"round {r + 1} {k}: {v}" for k, v in result["errors"].items()]
        skipped.update(result["skipped"])
        for name, value in measures(result).items():
            values[side][name].append(value)
    rows = []
    for name in sorted(set(values["old"]) | set(values["new"]), key=_order):
        old, new = values["old"].get(name, []), values["new"].get(name, [])
        if not old or not new:
            continue
        o, n = statistics.median(old), statistics.median(new)
        rows.append({
            "measure": name,
            "old": o, "old_range": [min(old), max(old)], "old_rounds": old,
            "new": n, "new_range": [min(new), max(new)], "new_rounds": new,
            "new_over_old": n / o if o else float("nan"),
            "beyond_noise": min(new) > max(old) or max(new) < min(old),
        })  # fmt: skip
    plan = json.loads((raw / "plan.json").read_text()) if (raw / "plan.json").exists() else {}
    return {
        "meta": {
            **plan,
            "summarized": time.strftime("%Y-%m-%dT%H:%M:%S%z"),
            "runs_per_side": {s: len({r for side, r, _ in _runs(raw) if side == s}) for s in SIDES},
            "load_before": {s: [min(v), max(v)] if v else [] for s, v in loads.items()},
            "command": "python -m bench.ab " + " ".join(sys.argv[1:]),
        },
        "skipped": skipped,
        "errors": errors,
        "rows": rows,
    }


def _order(name: str) -> tuple[int, int, str]:
    section, target, _ = name.split("|")
    sections = ("latency", "contention", "scale", "peers", "runtime")
    targets = [*TARGETS, "rabbitmq", "rabbitmq (quick sizes)"]
    return (
        sections.index(section),
        targets.index(target) if target in targets else len(targets),
        name,
    )


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.ab", description=__doc__.split("\n")[0])
    parser.add_argument("--old", type=Path, help="the old checkout (its bench/ runs)")
    parser.add_argument("--old-python", type=Path, help="its interpreter (bench group synced)")
    parser.add_argument("--new", type=Path, default=ROOT, help="the new checkout (default: here)")
    parser.add_argument("--new-python", type=Path, default=Path(sys.executable))
    parser.add_argument("--rounds", type=int, default=5, help="rounds of the whole plan")
    parser.add_argument("--steps", type=int, help="only the plan's first STEPS steps (a check)")
    parser.add_argument("--raw", type=Path, required=True, help="folder of every run's JSON")
    parser.add_argument("--out", type=Path, default=ROOT / "bench" / "results" / "ab.json")
    parser.add_argument("--summarize", action="store_true", help="only summarize --raw")
    args = parser.parse_args(argv)
    if not args.summarize:
        if args.old is None or args.old_python is None:
            parser.error("--old and --old-python are needed to run (or --summarize)")
        for path in (args.old, args.old_python, args.new, args.new_python):
            if not path.exists():
                parser.error(f"{path} does not exist")
        run_plan(args)
    summary = summarize(args.raw)
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(summary, indent=2) + "\n")
    print(tables(summary))
    print(f"comparison: {args.out}", file=sys.stderr)
    return 0


if __name__ == "__main__":
    os.environ.setdefault("PYTHONUNBUFFERED", "1")
    sys.exit(main())
