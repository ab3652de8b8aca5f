"""A primary and its replica failed over again and again (the replica cut off for 0.2 s, then the
primary killed and the replica promoted), with ``wait_replicas=1``: the failover harness
(bench/chaos, topologies ``redis-replica`` and ``redis-cluster``: the job's primary of a
3 + 3 cluster), short profile. With the option, no claim
answered ``won`` is missing on the promoted replica, so no slot has a second winner and the
store forgets nothing; without it (``--option async``, measured by ``nox -s chaos``) it does.
It asserts counts, not speed."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]

pytestmark = [pytest.mark.processes, pytest.mark.slow]


@pytest.mark.parametrize("topology", ["redis-replica", "redis-cluster"])
def test_no_second_winner_across_failovers_with_wait_replicas(
    tmp_path: Path, topology: str
) -> None:
    if shutil.which("redis-server") is None:
        pytest.skip("redis-server is not installed")
    out = tmp_path / "chaos.json"
    command = [sys.executable, "-m", "bench.chaos", topology, "--option", "wait-replicas"]
    done = subprocess.run(
        [*command, "--out", str(out)],
        check=False,
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=240,
    )
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    (tally,) = json.loads(out.read_text())
    assert tally["option"] == "wait-replicas"
    assert len(tally["faults"]) >= 3
    assert tally["claims"] >= 600
    assert len(tally["recover_ms"]) == len(tally["faults"])
    assert tally["duplicate_winners"] == 0
    assert tally["forgotten"] == 0
    assert tally["nobody_won"] == 0
