"""The terminal tables (rich) of one run's results: ratios, never bare times alone."""

from __future__ import annotations

import sys
from typing import Any

from rich.console import Console
from rich.table import Table

from .fleet_report import print_fleet

__all__ = ["print_report"]


def _mark(met: bool | None) -> str:
    return "-" if met is None else ("[green]yes[/]" if met else "[red]no[/]")


def print_report(results: dict[str, Any], console: Console | None = None) -> None:
    console = console or Console(width=None if sys.stdout.isatty() else 180)
    meta = results["meta"]
    console.print(
        f"[bold]anarchon benchmarks[/] ({meta['mode']}, {meta['seconds']:.0f} s, "
        f"load {meta['load_before']} before, {meta['cpus']} CPUs, Python {meta['python']})"
    )
    for name, reason in results.get("skipped", {}).items():
        console.print(f"  skipped {name}: {reason}")
    if results.get("latency"):
        t = Table(title="1. Sequential claim latency / floor (median, p99; per-round spread)")
        for col in ("target", "floor", "floor p50 us", "won p50", "won p99", "lost p50"):
            t.add_column(col)
        for col in ("lost p99", "won rounds", "target", "met"):
            t.add_column(col)
        for r in results["latency"]:
            w, lo = r["won"], r["lost"]
            t.add_row(
                r["target"],
                r["floor_op"],
                f"{r['floor']['median_us']:.0f}",
                f"{w['median_ratio']:.2f}x",
                f"{w['p99_ratio']:.2f}x",
                f"{lo['median_ratio']:.2f}x",
                f"{lo['p99_ratio']:.2f}x",
                f"{w['round_ratio_min']:.2f}-{w['round_ratio_max']:.2f}",
                f"<= {r['ratio_target']}x",
                _mark(r["met"]),
            )
        console.print(t)
    if results.get("contention"):
        t = Table(title="2. Contention: claims/s (ratio to 2 tasks) and exactly one winner per run")
        for col in (
            "target",
            "runs",
            "2 tasks/s",
            "8 tasks",
            "32 tasks",
            "4 processes",
            "1 winner",
        ):
            t.add_column(col)
        for r in results["contention"]:
            rows = r["rows"]
            first = rows[0]["claims_per_s"]
            t.add_row(
                r["target"],
                str(r["runs"]),
                f"{first:.0f}",
                *(f"{x['claims_per_s'] / first:.2f}x" for x in rows[1:]),
                _mark(r["met"]),
            )
        console.print(t)
    if results.get("scale"):
        t = Table(title="3. Scale: seconds until every job of one slot has a winner")
        sizes = sorted({c["jobs"] for r in results["scale"] for c in r["curve"]})
        t.add_column("target")
        t.add_column("path")
        for size in sizes:
            t.add_column(f"{size} jobs")
        for col in ("x target", "met", "4 instances", "4 / 1", "1 winner"):
            t.add_column(col)
        for r in results["scale"]:
            one = r["one_instance_s"]
            seconds = {
                c["jobs"]: f"{c['seconds']:.3f}"
                + (f" ({c['not_won']} not won)" if c["not_won"] else "")
                for c in r["curve"]
            }
            together = r["instances_s"]
            t.add_row(
                r["target"],
                r["batch"],
                *(seconds.get(size, "-") for size in sizes),
                f"{one / r['target_s']:.2f} of {r['target_s']} s" if one else "-",
                _mark(r["met"]),
                f"{together:.3f}" if together else "failed",
                f"{together / one:.2f}x" if one and together else "-",
                _mark(r["instances_exactly_one_winner"]),
            )
        console.print(t)
        for r in results["scale"]:
            if r.get("instances_error"):
                console.print(f"  {r['target']}, 4 instances: {r['instances_error'][:300]}")
            prepared = {c["jobs"]: c["prepared_s"] for c in r["curve"] if "prepared_s" in c}
            if prepared:
                console.print(
                    f"  {r['target']}: each slot prepared ahead first (untimed above): "
                    + ", ".join(f"{n} jobs {s:.2f} s" for n, s in sorted(prepared.items()))
                )
            if r.get("unbounded", "ok") != "ok":
                console.print(
                    f"  {r['target']}, all claims at once as the scheduler sends them: "
                    f"{r['unbounded']}"
                )
    if results.get("runtime"):
        p = results["runtime"]["precision"]
        k = results["runtime"]["takeover"]
        m = results["runtime"]["memory"]
        console.print("[bold]4. Runtime[/] (SQLite, 3 scheduler processes)")
        console.print(
            f"  slot -> job start over {p['slots']} slots: p50 {p['p50_ms']:.1f} ms, "
            f"p99 {p['p99_ms']:.1f} ms"
        )
        console.print(
            f"  takeover after kill -9 ({k['rounds']} rounds): median {k['median_ms']:.0f} ms, "
            f"max {k['max_over_bound']:.2f}x of lease + heartbeat ({k['bound_ms']} ms)"
        )
        console.print(
            f"  memory per 1,000 scheduled jobs: {m['traced_kib_per_1000_jobs']:.0f} KiB "
            f"(tracemalloc), {m['rss_kib_per_1000_jobs']:.0f} KiB (RSS)"
        )
    peers = results.get("peers")
    if peers and peers["rows"]:
        t = Table(title="5. Peers on the same store: peer / anarchon (> 1: the peer is slower)")
        for col in ("store", "peer", "vs", "median", "p99"):
            t.add_column(col)
        for r in peers["rows"]:
            t.add_row(
                r["store"],
                r["peer"],
                r["compared_to"],
                f"{r['median_ratio']:.2f}x",
                f"{r['p99_ratio']:.2f}x",
            )
        console.print(t)
        for name, reason in peers["skipped"].items():
            console.print(f"  peer skipped ({name}): {reason}")
    if results.get("fleet"):
        print_fleet(results["fleet"], console)
