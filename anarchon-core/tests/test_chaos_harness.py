"""The failover harness (bench/chaos) on its reference topology, one Redis killed and restarted,
short profile: with ``appendfsync always`` the restarted server remembers every claim it answered
(no duplicate winner, nothing forgotten); without persistence it comes back empty, and the
harness must see that (slots winnable again). It asserts counts, not speed."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]

pytestmark = [pytest.mark.processes, pytest.mark.services, pytest.mark.slow]


def test_the_harness_counts_what_a_restart_forgets(tmp_path: Path) -> None:
    if shutil.which("redis-server") is None:
        pytest.skip("redis-server is not installed")
    out = tmp_path / "chaos.json"
    command = [sys.executable, "-m", "bench.chaos", "redis-restart", "--option", "all"]
    done = subprocess.run(
        [*command, "--out", str(out)],
        check=False,
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=240,
    )
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    forgetful, durable = json.loads(out.read_text())
    assert (forgetful["option"], durable["option"]) == ("no-persistence", "aof-always")
    for tally in (forgetful, durable):
        assert len(tally["faults"]) >= 3
        assert tally["slots"] > 0
        assert tally["claims"] >= 600
        assert len(tally["recover_ms"]) == len(tally["faults"])
    # Every slot decided before the last restart is gone from the empty server.
    assert forgetful["forgotten"] > 0
    assert durable["duplicate_winners"] == 0
    assert durable["forgotten"] == 0
    assert durable["nobody_won"] == 0
    assert durable["unknown"] == 0
