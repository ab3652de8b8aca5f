"""A fleet of scheduler processes with contenders (DESIGN section 12) on one SQLite file, and on
Redis, with each backend's own member list (M1), while members join, leave (SIGTERM) and die
(SIGKILL).

The workers (fleet_roles_worker.py) journal each run they execute and their role in each
(job, slot). The check counts every slot's fate, as test_fleet_restarts.py does: in the window
where at least two instances were up, every (job, slot) has exactly one succeeded record in the
store and one first attempt in the journal; and the load was shaped: about `contenders` claims
per (job, slot) at the slot, the others read after the grace, and fallbacks only right after an
instance left or died."""

from __future__ import annotations

import asyncio
import json
import os
import select
import signal
import sqlite3
import subprocess
import sys
import time
import uuid
from collections import Counter, defaultdict
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

import anarchon
from anarchon import RunStatus

pytestmark = [pytest.mark.processes, pytest.mark.slow]

REDIS_URL = os.environ.get("ANARCHON_TEST_REDIS_URL", "redis://127.0.0.1:6379/0")

WORKER = Path(__file__).with_name("fleet_roles_worker.py")
JOBS = 6
K = 2
REFRESH_S = 1.0
"""A dead member stays listed up to three refreshes: the two or three slots after the kill
then lose both their contenders in about a third of the jobs, for certain."""
GRACE_S = 0.5
PHASE_S = 3.0
CHURN_S = REFRESH_S * 3 + GRACE_S + 1.5
"""How long after an instance leaves or dies its slots may still fall back to the others: its
ttl (three refreshes), the grace, and a claim's time on a loaded machine."""


@pytest.fixture(
    params=["sqlite", pytest.param("redis-lease", marks=pytest.mark.services)],
)
def store_url(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[str]:
    if request.param == "sqlite":
        yield f"sqlite:///{tmp_path / 'store.db'}"
        return
    redis = pytest.importorskip("redis")
    prefix = "fleetroles" + uuid.uuid4().hex[:12]
    client = redis.Redis.from_url(REDIS_URL)
    try:
        client.ping()
    except redis.ConnectionError:
        pytest.skip(f"no Redis at {REDIS_URL}: start it or set ANARCHON_TEST_REDIS_URL")
    yield f"{REDIS_URL}?prefix={prefix}"
    for key in client.scan_iter(match=f"{{{prefix}:*", count=500):
        client.delete(key)
    client.close()


class Fleet:
    def __init__(self, tmp: Path, store: str) -> None:
        self.tmp = tmp
        self.journal = tmp / "journal.db"
        db = sqlite3.connect(self.journal, isolation_level=None)
        db.execute("PRAGMA journal_mode=WAL")
        db.execute("CREATE TABLE runs (job, slot, attempt, instance, at)")
        db.execute("CREATE TABLE roles (job, slot, instance, role, won, at)")
        db.close()
        self.config = {
            "store": store,
            "journal": str(self.journal),
            "jobs": JOBS,
            "contenders": K,
            "fleet_grace": f"{int(GRACE_S * 1000)}ms",
            "fleet_refresh": f"{int(REFRESH_S * 1000)}ms",
            "max_late": "3s",
            "lease": "1500ms",
        }
        self.procs: list[subprocess.Popen[str]] = []
        self.churn: list[float] = []

    def launch(self, count: int) -> list[subprocess.Popen[str]]:
        started = []
        for _ in range(count):
            log = (self.tmp / f"worker-{len(self.procs)}.log").open("w")
            proc = subprocess.Popen(
                [sys.executable, str(WORKER), json.dumps(self.config)],
                stdout=subprocess.PIPE,
                stderr=log,
                text=True,
            )
            log.close()
            self.procs.append(proc)
            started.append(proc)
        deadline = time.monotonic() + 20
        for proc in started:
            assert proc.stdout is not None
            ready, _, _ = select.select([proc.stdout], [], [], max(deadline - time.monotonic(), 0))
            assert ready and proc.stdout.readline().strip() == "ready", self.tail()
        return started

    def terminate(self, proc: subprocess.Popen[str]) -> None:
        self.churn.append(time.time())
        proc.send_signal(signal.SIGTERM)
        assert proc.wait(15) == 0, self.tail()

    def kill(self, proc: subprocess.Popen[str]) -> None:
        self.churn.append(time.time())
        proc.kill()
        proc.wait()

    def close(self) -> None:
        for proc in self.procs:
            if proc.poll() is None:
                proc.kill()
            proc.wait()
            if proc.stdout is not None:
                proc.stdout.close()

    def tail(self) -> str:
        return "\n".join(p.read_text()[-1500:] for p in sorted(self.tmp.glob("worker-*.log")))

    def rows(self, table: str) -> list[tuple[Any, ...]]:
        db = sqlite3.connect(self.journal, timeout=30)
        try:
            return list(db.execute(f"SELECT * FROM {table}"))
        finally:
            db.close()


def history(url: str) -> dict[tuple[str, int], RunStatus]:
    async def read() -> dict[tuple[str, int], RunStatus]:
        async with anarchon.connect(url, read_only=True) as store:
            return {
                (f"j{j}", r.slot): r.status
                for j in range(JOBS)
                for r in await store.history(f"j{j}", 500)
            }

    return asyncio.run(read())


def test_every_slot_runs_once_while_members_join_leave_and_die(
    tmp_path: Path, store_url: str
) -> None:
    fleet = Fleet(tmp_path, store_url)
    try:
        first = fleet.launch(3)
        start = time.time()
        time.sleep(PHASE_S)
        fleet.launch(1)  # joins
        time.sleep(PHASE_S)
        fleet.terminate(first[0])  # leaves
        time.sleep(PHASE_S)
        # Two of the three die at once, still listed until their ttl runs out: a third of the
        # slots lose both their contenders, and only the survivor's fallback decides them.
        fleet.kill(first[1])
        fleet.kill(first[2])
        time.sleep(PHASE_S)
        fleet.launch(2)
        time.sleep(PHASE_S)
        end = time.time()
        for proc in fleet.procs:
            if proc.poll() is None:
                proc.send_signal(signal.SIGTERM)
        for proc in fleet.procs:
            assert proc.wait(15) in (0, -signal.SIGKILL), fleet.tail()
    finally:
        fleet.close()

    died = fleet.churn[-1]
    window = range(int(start + 1.5) * 1000, int(end - 1.5) * 1000, 1000)
    assert len(window) >= 10
    keys = [(f"j{j}", slot) for j in range(JOBS) for slot in window]
    ledger = history(store_url)
    runs = fleet.rows("runs")
    firsts = Counter((job, slot) for job, slot, attempt, _, _ in runs if attempt == 1)
    ran = {(job, slot) for job, slot, _, _, _ in runs}
    missing = [k for k in keys if ledger.get(k) is not RunStatus.SUCCEEDED]
    assert not missing, f"slots not run: {missing[:10]}\n{fleet.tail()}"
    assert not [k for k in keys if k not in ran], "a run the store recorded is not journaled"
    twice = [k for k, n in firsts.items() if n > 1]
    assert not twice, f"first attempts that ran twice: {twice}"

    roles: dict[tuple[str, int], Counter[str]] = defaultdict(Counter)
    fallback_slots = []
    for job, slot, _, role, _, _ in fleet.rows("roles"):
        if slot in window:
            roles[(job, slot)][role] += 1
            if role == "fallback":
                fallback_slots.append(slot / 1000)
    contended = sum(c["contender"] for c in roles.values()) / len(keys)
    silent = sum(c["silent"] for c in roles.values())
    assert contended <= K + 0.5, f"{contended:.2f} contender claims per slot (k={K})"
    # 3, 4, 3, 1 (and the two dead) and 3 instances: about one silent reader per (job, slot).
    assert silent > len(keys) / 2, "non-contenders read instead of claiming at the slot"
    rescued = [s for s in fallback_slots if died - 1 <= s <= died + CHURN_S]
    assert rescued, "the slots of the two dead contenders were decided by a fallback"
    started = {(job, slot): at for job, slot, attempt, _, at in runs if attempt == 1}
    delays = [
        started[(job, slot)] - slot / 1000
        for (job, slot), c in roles.items()
        if c["fallback"] and (job, slot) in started
    ]
    assert delays and max(delays) < GRACE_S + 1.5, f"fallback runs started late: {delays}"
    assert min(delays) >= GRACE_S - 0.05, f"a fallback did not wait the grace: {delays}"
    stray = [s for s in fallback_slots if not any(t - 1.5 <= s <= t + CHURN_S for t in fleet.churn)]
    assert not stray, f"fallbacks with every contender alive: slots {stray}, churn {fleet.churn}"
