"""The fleet benchmark's quick profile (issue 25) as a smoke test, on SQLite (no server): it runs,
writes its JSON, and what it counted holds: every job of every run won exactly once, the kill
phase's orphaned jobs decided after the grace. Speed is not asserted (the benchmark reports it)."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent

pytestmark = pytest.mark.processes


def test_fleet_quick_profile_counts_one_winner_per_job(tmp_path: Path) -> None:
    command = [sys.executable, "-m", "bench", "--quick", "--only", "fleet,sqlite"]
    done = subprocess.run(
        [*command, "--out", str(tmp_path)],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )
    assert done.returncode == 0, done.stdout + done.stderr
    fleet = json.loads((tmp_path / "fleet.json").read_text())["fleet"]
    assert [t["target"] for t in fleet["targets"]] == ["sqlite"]
    rows = fleet["targets"][0]["rows"]
    modes = {r["mode"] for r in rows}
    assert modes == {"everyone", "k2-check", "k2-batch", "k2-live", "k2-w1", "k1-w1"}
    for row in rows:
        assert (row["duplicates"], row["undecided"]) == (0, 0), row
    everyone = next(r for r in rows if r["mode"] == "everyone" and r["instances"] == 4)
    live = next(r for r in rows if r["mode"] == "k2-live" and not r["kill"])
    assert everyone["claims"] == 4 * everyone["jobs"]
    assert live["claims"] == 2 * live["jobs"]
    tiers = next(r for r in rows if r["mode"] == "k2-w1" and not r["kill"])
    assert tiers["claims"] == 3 * tiers["jobs"], "two contenders and one watcher per job"
    kills = [r for r in rows if r["kill"]]
    assert kills
    for row in kills:
        assert row["orphans"] > 0, row
        assert row["orphans_decided_s"] >= row["grace_s"], row
