"""Smoke test of the benchmark suite: ``python -m bench --quick --only sqlite`` runs and writes
its JSON. It asserts nothing about speed (the machine may be busy)."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]

pytestmark = pytest.mark.processes


def test_quick_run_on_sqlite_writes_its_results(tmp_path: Path) -> None:
    pytest.importorskip("rich")
    done = subprocess.run(
        [sys.executable, "-m", "bench", "--quick", "--only", "sqlite", "--out", str(tmp_path)],
        check=False,
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=240,
    )
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    results = json.loads((tmp_path / "bench.json").read_text())
    assert results["meta"]["mode"] == "quick"
    assert {"latency", "contention", "scale", "runtime", "peers", "skipped", "errors"} <= set(
        results
    )
    assert results["errors"] == {}
    [latency] = results["latency"]
    assert latency["target"] == "sqlite"
    assert {"median_ratio", "p99_ratio"} <= set(latency["won"])
    [contention] = results["contention"]
    assert all(row["exactly_one_winner"] for row in contention["rows"])
    [scale] = results["scale"]
    assert scale["instances_exactly_one_winner"]
    assert {"precision", "takeover", "memory"} <= set(results["runtime"])
    assert "ratio" in done.stdout or "x" in done.stdout
