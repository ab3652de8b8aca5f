"""PNG plots for the docs' Benchmarks page (matplotlib, Agg backend)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from .fleet_report import plot_fleet

__all__ = ["plot"]


def plot(results: dict[str, Any], folder: Path) -> list[Path]:
    """latency-ratio.png (won and lost median / floor, with each target) and scale.png (time to
    decide every job of one slot, 100 to 10,000 jobs), and the fleet phase's (`plot_fleet`).
    Returns the files written."""
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        print("plots skipped: matplotlib is not installed (uv sync --group bench)")
        return []
    folder.mkdir(parents=True, exist_ok=True)
    written = []
    latency = results.get("latency", [])
    if latency:
        fig, ax = plt.subplots(figsize=(8, 4.2))
        names = [r["target"] for r in latency]
        xs = range(len(names))
        won = [r["won"]["median_ratio"] for r in latency]
        lost = [r["lost"]["median_ratio"] for r in latency]
        ax.bar([x - 0.2 for x in xs], won, 0.4, label="won")
        ax.bar([x + 0.2 for x in xs], lost, 0.4, label="lost")
        for x, r in zip(xs, latency, strict=True):
            ax.hlines(r["ratio_target"], x - 0.45, x + 0.45, colors="black", linestyles="dashed")
        ax.axhline(1.0, color="grey", linewidth=0.8)
        ax.set_xticks(list(xs), names, rotation=30, ha="right")
        ax.set_ylabel("median claim / median floor")
        ax.set_title("Claim latency as a ratio to the store's floor (dashed: target)")
        ax.legend()
        fig.tight_layout()
        path = folder / "latency-ratio.png"
        fig.savefig(path, dpi=110)
        plt.close(fig)
        written.append(path)
    scale = results.get("scale", [])
    if scale:
        fig, ax = plt.subplots(figsize=(8, 4.2))
        for r in scale:
            curve = r["curve"]
            ax.plot(
                [c["jobs"] for c in curve],
                [c["seconds"] for c in curve],
                marker="o",
                label=f"{r['target']} ({r['batch']})",
            )
        ax.set_xscale("log")
        ax.set_yscale("log")
        ax.set_xlabel("jobs due in one slot (one instance)")
        ax.set_ylabel("seconds until every job has a winner")
        ax.set_title("Scale: one slot, many jobs")
        ax.legend(fontsize=7)
        ax.grid(True, which="both", linewidth=0.3)
        fig.tight_layout()
        path = folder / "scale.png"
        fig.savefig(path, dpi=110)
        plt.close(fig)
        written.append(path)
    if results.get("fleet"):
        written += plot_fleet(results["fleet"], folder, plt)
    return written
