"""The fleet phase's verdicts against issue 25's targets, its terminal table, its Markdown tables
(``python -m bench.fleet_report bench/results/fleet.json``: what docs/benchmarks.md shows) and
its plots (ops, CPU and time to decide per run against N, one panel per backend)."""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

from .fleet import FLEET_TARGETS

__all__ = ["fleet_markdown", "fleet_verdicts", "plot_fleet", "print_fleet"]

CPU_TARGET = 1.5
DECIDE_TARGET_S = {"redis/lease": 1.0, "redis/idmp": 1.0, "postgres": 1.0, "nats": 2.0}
BIG_N, BIG_J = 128, 10_000
MODE_NAMES = ("everyone", "k2-check", "k2-batch", "k2-live", "k2-w1", "k1-w1")


def _row(t: dict[str, Any], mode: str, n: int, jobs: int, kill: bool = False) -> Any:
    return next(
        (
            r
            for r in t["rows"]
            if r["mode"] == mode and r["instances"] == n and r["jobs"] == jobs and r["kill"] == kill
        ),
        None,
    )


def fleet_verdicts(fleet: dict[str, Any]) -> list[dict[str, Any]]:
    """One line per (target, goal): the measured value, the goal, met or not (None: not run)."""
    out: list[dict[str, Any]] = []
    for t in fleet["targets"]:
        name = t["target"]
        one = _row(t, "everyone", 1, BIG_J)
        for mode in ("k1-w1", "k2-w1", "k2-live", "k2-batch", "k2-check", "everyone"):
            big = _row(t, mode, BIG_N, BIG_J)
            if name in ("redis/lease", "postgres") and one and big:
                ratio = big["cpu_us_per_run"] / max(one["cpu_us_per_run"], 1e-9)
                out.append({"target": name, "goal": f"CPU/run N={BIG_N} / N=1 ({mode})",
                            "value": f"{ratio:.2f}x", "limit": f"<= {CPU_TARGET}x",
                            "met": ratio <= CPU_TARGET})  # fmt: skip
            if name in DECIDE_TARGET_S and big:
                limit = DECIDE_TARGET_S[name]
                # The same slot on one instance, in the same run: what the machine allowed.
                alone = f" (N=1: {one['decided_s']:.3f} s)" if one else ""
                out.append({"target": name, "goal": f"N={BIG_N} J={BIG_J} decided ({mode})",
                            "value": f"{big['decided_s']:.3f} s{alone}", "limit": f"<= {limit} s",
                            "met": big["decided_s"] is not None and big["decided_s"] <= limit})  # fmt: skip
        for r in t["rows"]:
            if r["kill"]:
                rtt = r["contend_rtt_s"] or 0.0
                took = r["orphans_decided_s"]
                out.append({"target": name,
                            "goal": f"kill {r['mode']} N={r['instances']} J={r['jobs']}",
                            "value": "lost" if took is None else f"{took:.3f} s",
                            "limit": f"<= {r['grace_s']} + {rtt:.3f} s",
                            "met": took is not None and took <= r["grace_s"] + rtt})  # fmt: skip
        dup = sum(r["duplicates"] for r in t["rows"])
        lost = sum(r["undecided"] for r in t["rows"])
        out.append({"target": name, "goal": f"duplicates / undecided ({len(t['rows'])} runs)",
                    "value": f"{dup} / {lost}", "limit": "0 / 0", "met": dup == 0 and lost == 0})  # fmt: skip
    return out


def print_fleet(fleet: dict[str, Any], console: Any) -> None:
    from rich.table import Table

    table = Table(title="Fleet scale (issue 25): targets")
    for col in ("target", "goal", "measured", "target", "met"):
        table.add_column(col)
    for v in fleet_verdicts(fleet):
        met = "[green]yes[/]" if v["met"] else "[red]no[/]"
        table.add_row(v["target"], v["goal"], v["value"], v["limit"], met)
    console.print(table)
    for name, reason in {**fleet["skipped"], **fleet["errors"]}.items():
        console.print(f"  fleet {name}: {reason}")


def fleet_markdown(fleet: dict[str, Any]) -> str:
    """Per backend: CPU us and store operations per decided run, and seconds until every job of
    the slot was decided, as (mode, J) rows against N columns; then the targets."""
    lines: list[str] = []
    for t in fleet["targets"]:
        sizes = sorted({r["instances"] for r in t["rows"]})
        lines += [f"**{t['target']}** (ops: {t['ops_meaning']}; CPU: {t['cpu_meaning']})", ""]
        lines.append("| mode | J | " + " | ".join(f"N={n}" for n in sizes) + " |")
        lines.append("|---|---|" + "---|" * len(sizes))
        keys = sorted({(r["mode"], r["jobs"]) for r in t["rows"] if not r["kill"]},
                      key=lambda k: (k[1], k[0]))  # fmt: skip
        for mode, jobs in keys:
            cells = []
            for n in sizes:
                r = _row(t, mode, n, jobs)
                cells.append(
                    "-" if r is None else
                    f"{r['cpu_us_per_run']:.0f} us, {r['ops_per_run']:g} ops, {r['decided_s']:.3f} s"
                )  # fmt: skip
            lines.append(f"| {mode} | {jobs:,} | " + " | ".join(cells) + " |")
        over = t["over_budget"]
        if over:
            lines += ["", "Over the run budget (not run): " + ", ".join(
                f"{o['mode']} N={o['instances']} J={o['jobs']:,}" for o in over)]  # fmt: skip
        hb = t.get("heartbeat", {})
        if hb.get("rows") and "ops_per_refresh" in hb["rows"][0]:
            lines += ["", "Heartbeat, one refresh of the whole fleet (each member announces and "
                      "reads the list): " + ", ".join(
                f"N={r['instances']}: {r['ops_per_refresh']:g} ops, "
                f"{r['cpu_ms_per_refresh']:g} ms CPU" for r in hb["rows"]), ""]  # fmt: skip
        else:
            lines += ["", f"Heartbeat: {hb.get('todo') or hb.get('rows')}", ""]
    lines += ["| target | goal | measured | target | met |", "|---|---|---|---|---|"]
    for v in fleet_verdicts(fleet):
        met = "yes" if v["met"] else "**no**"
        lines.append(f"| {v['target']} | {v['goal']} | {v['value']} | {v['limit']} | {met} |")
    return "\n".join(lines) + "\n"


def plot_fleet(fleet: dict[str, Any], folder: Path, plt: Any) -> list[Path]:
    """fleet-cpu.png, fleet-ops.png, fleet-decided.png: per backend, each mode's value per
    decided run against N (J = 1,000 solid, 10,000 dashed)."""
    targets = fleet["targets"]
    if not targets:
        return []
    written = []
    metrics = (
        ("cpu_us_per_run", "server CPU us per decided run", "fleet-cpu.png"),
        ("ops_per_run", "store operations per decided run", "fleet-ops.png"),
        ("decided_s", "seconds until every job is decided", "fleet-decided.png"),
    )
    for key, label, file in metrics:
        fig, axes = plt.subplots(1, len(targets), figsize=(3.6 * len(targets), 3.6), squeeze=False)
        for ax, t in zip(axes[0], targets, strict=True):
            for mode, color in zip(MODE_NAMES, ("C3", "C1", "C0", "C2", "C4", "C5"), strict=True):
                for jobs, style in ((1_000, "-"), (10_000, "--")):
                    rows = sorted(
                        (r for r in t["rows"] if r["mode"] == mode and r["jobs"] == jobs
                         and not r["kill"] and r[key] is not None),
                        key=lambda r: r["instances"],
                    )  # fmt: skip
                    if rows:
                        ax.plot([r["instances"] for r in rows], [r[key] for r in rows], style,
                                color=color, marker="o", label=f"{mode} J={jobs:,}")  # fmt: skip
            ax.set_xscale("log", base=2)
            ax.set_yscale("log")
            ax.set_title(t["target"])
            ax.set_xlabel("instances N")
            ax.grid(True, which="both", linewidth=0.3)
        axes[0][0].set_ylabel(label)
        axes[0][0].legend(fontsize=6)  # the first target runs every mode
        fig.tight_layout()
        path = folder / file
        fig.savefig(path, dpi=100)
        plt.close(fig)
        written.append(path)
    return written


def merge(path: Path, others: list[Path]) -> dict[str, Any]:
    """`path`'s results with the fleet targets of `others` in place of its own of the same name
    (a backend measured again alone), written back to `path`."""
    data = json.loads(path.read_text())
    for other in others:
        more = json.loads(other.read_text())["fleet"]
        names = {t["target"] for t in more["targets"]}
        fleet = data["fleet"]
        fleet["targets"] = [t for t in fleet["targets"] if t["target"] not in names]
        fleet["targets"] += more["targets"]
        for key in ("skipped", "errors"):
            fleet[key] = {k: v for k, v in fleet[key].items() if k not in names}
        data.setdefault("merged", []).append({"from": other.name, "targets": sorted(names)})
    order = [name for name, _, _ in FLEET_TARGETS]
    data["fleet"]["targets"].sort(key=lambda t: order.index(t["target"]))
    path.write_text(json.dumps(data, indent=2) + "\n")
    return data


def main(argv: list[str]) -> None:
    """``python -m bench.fleet_report RESULTS.json [--merge OTHER.json ...] [--plots DIR]``: the
    Markdown tables (after merging other runs' targets in, and drawing the plots again)."""
    path, rest = Path(argv[0]), argv[1:]
    plots = Path(rest.pop(rest.index("--plots") + 1)) if "--plots" in rest else None
    others = [Path(a) for a in rest if a != "--plots" and a != "--merge"]
    data = merge(path, others) if others else json.loads(path.read_text())
    if plots is not None:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt

        plot_fleet(data["fleet"], plots, plt)
    print(fleet_markdown(data.get("fleet", data)))


if __name__ == "__main__":
    main(sys.argv[1:])
