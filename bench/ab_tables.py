"""The A/B comparison of ``python -m bench.ab`` as Markdown tables, one per section."""

from __future__ import annotations

from typing import Any

__all__ = ["tables"]

TITLES = {
    "latency": "Claim latency: median claim / median floor (floor in µs, for the load)",
    "contention": "Contention: claims per second with 2 claimers, and 32 claimers as a ratio",
    "scale": "Scale: seconds until every job of one slot has a winner",
    "peers": "Peers: peer / anarchon, median",
    "runtime": "Runtime (SQLite, 3 scheduler processes; memory on memory://)",
}


HIDDEN = ("floor us", "one winner")
"""Measures kept in the JSON but not in the tables: the floors' absolute times (the load, not the
code) and the exactly-one-winner checks (summed up in one line below the tables)."""


def _number(measure: str, value: float) -> str:
    if "/" in measure and "claims/s" not in measure:
        return f"{value:.2f}x"
    if measure.endswith(" s"):
        return f"{value:.3f}"
    if measure.endswith(" ms"):
        return f"{value:.1f}"
    if measure == "one winner":
        return "yes" if value == 1 else "no"
    return f"{value:.0f}"


def _cell(measure: str, median: float, low: float, high: float) -> str:
    return f"{_number(measure, median)} ({_number(measure, low)}-{_number(measure, high)})"


def tables(summary: dict[str, Any]) -> str:
    """Every row of the comparison: old and new (median of the rounds, their range), new / old,
    and "**yes**" where the two ranges do not overlap."""
    out: list[str] = []
    section = ""
    for row in summary["rows"]:
        name, target, measure = row["measure"].split("|")
        if measure in HIDDEN:
            continue
        if name != section:
            section = name
            out += ["", f"**{TITLES[name]}**", ""]
            out += ["| target | measure | old | new | new / old | beyond noise |"]
            out += ["|---|---|---|---|---|---|"]
        old = _cell(measure, row["old"], *row["old_range"])
        new = _cell(measure, row["new"], *row["new_range"])
        apart = "**yes**" if row["beyond_noise"] else "no"
        out.append(
            f"| {target} | {measure} | {old} | {new} | {row['new_over_old']:.2f} | {apart} |"
        )
    checks = [r for r in summary["rows"] if r["measure"].endswith("|one winner")]
    wrong = [r["measure"].split("|")[1] for r in checks if min(r["old_range"] + r["new_range"]) < 1]
    out += ["", f"Every run had exactly one winner (contention and scale, {len(checks)} checks a side): "
            + ("yes, on both sides." if not wrong else f"NO on {', '.join(wrong)}.")]  # fmt: skip
    meta = summary["meta"]
    out += ["", f"Runs per side: {meta['runs_per_side']}; load before: {meta['load_before']}."]
    for side, errors in summary["errors"].items():
        out += [f"errors ({side}): {e}" for e in errors]
    out += [f"skipped {name}: {reason}" for name, reason in summary["skipped"].items()]
    return "\n".join(out)
