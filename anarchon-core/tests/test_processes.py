"""The runtime across real OS processes sharing one SQLite file: single winner per slot, takeover
after kill -9, fencing after SIGSTOP/SIGCONT, lease release on SIGTERM."""

from __future__ import annotations

import asyncio
import os
import signal
import sqlite3
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

import anarchon

pytest.importorskip("anarchon_sqlite")
pytestmark = pytest.mark.processes

WORKER = Path(__file__).with_name("scheduler_worker.py")


class Cluster:
    def __init__(self, tmp_path: Path) -> None:
        self.store_db = tmp_path / "store.db"
        self.runs_db = tmp_path / "runs.db"
        self.procs: list[subprocess.Popen[str]] = []
        self.logs: dict[int, Path] = {}
        self.tmp = tmp_path

    def start(self, mode: str, count: int = 1) -> list[subprocess.Popen[str]]:
        """Start `count` workers together, then wait until each is ready."""
        started = []
        for _ in range(count):
            log = self.tmp / f"worker-{len(self.procs)}.log"
            with log.open("w") as stderr:
                proc = subprocess.Popen(
                    [sys.executable, str(WORKER), mode, str(self.store_db), str(self.runs_db)],
                    stdout=subprocess.PIPE,
                    stderr=stderr,
                    text=True,
                )
            self.logs[proc.pid] = log
            self.procs.append(proc)
            started.append(proc)
        for proc in started:
            assert proc.stdout is not None
            assert proc.stdout.readline().strip() == "ready", "worker did not start"
        return started

    def open_gate(self) -> None:
        """Long runs start from the next whole second on (see scheduler_worker.gated)."""
        gate = (int(time.time()) + 2) * 1000
        (self.tmp / "gate").write_text(str(gate))

    def rows(self, where: str = "1=1") -> list[tuple[int, int, int, str, float]]:
        if not self.runs_db.exists():
            return []
        db = sqlite3.connect(self.runs_db, timeout=30)
        try:
            return list(db.execute(f"SELECT slot, attempt, pid, event, at FROM runs WHERE {where}"))
        except sqlite3.OperationalError:
            return []
        finally:
            db.close()

    def wait_for(self, condition: Callable[[], bool], timeout: float, what: str) -> None:
        deadline = time.monotonic() + timeout
        while not condition():
            if time.monotonic() > deadline:
                logs = "\n".join(p.read_text()[-2000:] for p in self.logs.values())
                pytest.fail(f"timed out after {timeout} s waiting for {what}\n{logs}")
            time.sleep(0.02)

    def stop(self) -> None:
        for proc in self.procs:
            if proc.poll() is None:
                try:
                    os.kill(proc.pid, signal.SIGCONT)
                except ProcessLookupError:
                    pass
                proc.send_signal(signal.SIGTERM)
        for proc in self.procs:
            try:
                proc.wait(15)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()
            if proc.stdout:
                proc.stdout.close()


@pytest.fixture
def cluster(tmp_path: Path) -> Iterator[Cluster]:
    c = Cluster(tmp_path)
    yield c
    c.stop()


def history(cluster: Cluster, job: str) -> list[anarchon.RunRecord]:
    async def read() -> list[anarchon.RunRecord]:
        async with anarchon.connect(f"sqlite:///{cluster.store_db}") as store:
            return await store.history(job, 1000)

    return asyncio.run(read())


def test_three_processes_run_every_second_slot_exactly_once(cluster: Cluster) -> None:
    cluster.start("every-second", 3)
    cluster.wait_for(lambda: len({r[0] for r in cluster.rows()}) >= 30, 60, "30 slots")
    cluster.stop()
    assert all(p.returncode == 0 for p in cluster.procs), "a worker did not exit cleanly"
    rows = cluster.rows()
    slots = sorted(r[0] for r in rows)
    duplicates = sorted({s for s in slots if slots.count(s) > 1})
    assert not duplicates, f"slots that ran more than once: {duplicates}"
    unique = sorted(set(slots))
    assert unique == list(range(unique[0], unique[-1] + 1000, 1000)), "a slot was lost"
    assert len({r[2] for r in rows}) >= 2, "only one process ever won: no race was exercised"


def first_run(cluster: Cluster) -> tuple[int, int]:
    cluster.open_gate()
    cluster.wait_for(lambda: bool(cluster.rows("event = 'started'")), 20, "a first run")
    slot, _, pid, _, _ = cluster.rows("event = 'started'")[0]
    return slot, pid


def test_kill_9_of_the_winner_a_backup_takes_over_within_lease_plus_heartbeat(
    cluster: Cluster,
) -> None:
    procs = cluster.start("long-async", 2)
    slot, winner = first_run(cluster)
    killed_at = time.time()
    os.kill(winner, signal.SIGKILL)
    takeover = f"slot = {slot} AND attempt = 2 AND event = 'started'"
    cluster.wait_for(lambda: bool(cluster.rows(takeover)), 10, "attempt 2")
    _, _, pid, _, at = cluster.rows(takeover)[0]
    assert pid != winner and pid in {p.pid for p in procs}
    # The lease ran at most 1.5 s past the last renew, which was at most a heartbeat (0.3 s)
    # before the kill; the backup checks every heartbeat.
    assert at - killed_at <= 1.5 + 0.3 + 0.5, f"takeover took {at - killed_at:.2f} s"


def test_sigstop_past_the_lease_then_sigcont_the_old_winner_is_fenced(cluster: Cluster) -> None:
    cluster.start("long-sync", 2)
    slot, winner = first_run(cluster)
    os.kill(winner, signal.SIGSTOP)
    takeover = f"slot = {slot} AND attempt = 2 AND event = 'finished'"
    cluster.wait_for(lambda: bool(cluster.rows(takeover)), 10, "the takeover to finish")
    os.kill(winner, signal.SIGCONT)
    fenced = f"slot = {slot} AND attempt = 1 AND event = 'fenced' AND pid = {winner}"
    cluster.wait_for(lambda: bool(cluster.rows(fenced)), 10, "the old winner to see Fenced")
    log = cluster.logs[winner]
    cluster.wait_for(lambda: "its result is not recorded" in log.read_text(), 10, "refused finish")
    run = next(r for r in history(cluster, "long") if r.slot == slot)
    assert (run.attempt, run.status) == (2, anarchon.RunStatus.SUCCEEDED)
    assert run.holder != f"pid-{winner}"


@pytest.mark.parametrize("round_", range(3))
def test_F1_after_sigstop_past_the_lease_an_async_job_runs_no_fenced_step(
    cluster: Cluster, round_: int
) -> None:
    cluster.start("steps-async", 2)
    slot, winner = first_run(cluster)
    cluster.wait_for(lambda: bool(cluster.rows(f"pid = {winner} AND event = 'step'")), 5, "steps")
    os.kill(winner, signal.SIGSTOP)
    takeover = f"slot = {slot} AND attempt = 2 AND event = 'finished'"
    cluster.wait_for(lambda: bool(cluster.rows(takeover)), 10, "the takeover")
    os.kill(winner, signal.SIGCONT)
    mine = f"slot = {slot} AND attempt = 1 AND pid = {winner}"
    cluster.wait_for(lambda: bool(cluster.rows(f"{mine} AND event = 'cancelled'")), 10, "cancel")
    fenced_steps = cluster.rows(f"{mine} AND event = 'step-fenced'")
    assert not fenced_steps, f"the fenced runner worked on: {fenced_steps}"
    (_, _, _, _, took_over_at) = cluster.rows(f"slot = {slot} AND attempt = 2")[0]
    late = cluster.rows(f"{mine} AND event = 'step' AND at > {took_over_at}")
    assert not late, f"steps of the old winner after the takeover: {late}"


@pytest.mark.parametrize("round_", range(3))
def test_F1_a_sync_job_fenced_at_exit_runs_its_except_and_finally(
    cluster: Cluster, round_: int
) -> None:
    procs = cluster.start("steps-sync", 1)
    slot, winner = first_run(cluster)
    os.kill(winner, signal.SIGTERM)  # grace is 300 ms: the 0.5 s steps outlast it
    assert procs[0].wait(15) == 0
    events = [row[3] for row in cluster.rows(f"slot = {slot} AND pid = {winner}")]
    assert events[-2:] == ["fenced", "finally"], f"the job thread died mid-step: {events}"


def test_sigterm_releases_the_lease_so_a_backup_takes_over_at_once(cluster: Cluster) -> None:
    procs = cluster.start("long-lease", 2)
    slot, winner = first_run(cluster)
    stopped_at = time.time()
    os.kill(winner, signal.SIGTERM)
    takeover = f"slot = {slot} AND attempt = 2 AND event = 'started'"
    cluster.wait_for(lambda: bool(cluster.rows(takeover)), 10, "attempt 2 after SIGTERM")
    _, _, pid, _, at = cluster.rows(takeover)[0]
    assert pid != winner
    assert at - stopped_at < 5, "the backup waited for the 20 s lease instead of the release"
    proc = next(p for p in procs if p.pid == winner)
    assert proc.wait(10) == 0
