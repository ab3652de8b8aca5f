"""The failover harness (bench/chaos) on a PostgreSQL primary and a synchronous replica, a CI-sized
run: processes race on ascending slots while the primary is killed and a replica promoted;
with ``durability=replicated`` no slot may have two winners, none may be forgotten and
every claim is decided. (The asynchronous options are measured by ``nox -s chaos``; their
duplicates depend on timing, so they are counted there, not asserted here.)"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from .replicated_pair import _load

ROOT = Path(__file__).resolve().parents[2]

pytestmark = [
    pytest.mark.processes,
    pytest.mark.slow,
    pytest.mark.skipif(
        os.environ.get("ANARCHON_TEST_FAILOVER") != "1",
        reason="runs in `nox -s failover` (ANARCHON_TEST_FAILOVER=1): it counted one recovery "
        "fewer than its faults in 1 run of 8 in stop 31 (see its note)",
    ),
]

_RUN = """
import json, attrs
from bench.chaos.harness import PROFILES, run_chaos
from bench.chaos.topologies.postgres_failover import PostgresFailover
profile = attrs.evolve(
    PROFILES["short"], name="ci", processes=2, tasks=2, faults=1, claims=120, max_slots=40
)
print(json.dumps(run_chaos(PostgresFailover("sync"), profile).as_json()))
"""


def test_a_synchronous_replica_promoted_loses_no_claim() -> None:
    if not (_load().BIN / "pg_basebackup").exists():
        pytest.skip("pg_basebackup not found: set ANARCHON_TEST_POSTGRES_BIN")
    done = subprocess.run(
        [sys.executable, "-c", _RUN],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    tally = json.loads(done.stdout.strip().splitlines()[-1])
    assert len(tally["faults"]) >= 1
    assert tally["claims"] >= 120 and tally["slots"] > 0
    assert tally["duplicate_winners"] == 0
    assert tally["forgotten"] == 0
    assert tally["nobody_won"] == 0
    assert tally["unknown"] == 0
    assert len(tally["recover_ms"]) == len(tally["faults"])
