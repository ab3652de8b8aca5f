"""Pause, resume and trigger across a fleet (issue #26, items 1 and 2): three real scheduler
processes (control_worker.py) share a store; the operator acts through the real CLI, in a
subprocess, as on a real host. On SQLite, PostgreSQL and Redis (``strategy=lease``, and ``script``, which keeps no lease but
checks the pause in its claim script and claims triggered slots like any other).

- ``anarchon pause`` stops the every-second job ``tick`` on all three within one slot: no run
  starts for a slot after the pause was written plus one slot, every later slot is in the
  store's history as ``skipped`` with the reason ``paused: ...``, and each process was told so
  by the store (P1); ``anarchon resume`` brings it back, and every slot has one record.
- ``anarchon trigger --wait`` runs ``yearly`` (New Year only) exactly once, on one of the three,
  within about one ``trigger_poll`` (1 s here) of the trigger (X1); each process claimed it.
"""

from __future__ import annotations

import asyncio
import os
import re
import signal
import sqlite3
import subprocess
import sys
import time
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

import anarchon
from anarchon import RunRecord, RunStatus
from anarchon._connect import create_store

pytestmark = [pytest.mark.processes, pytest.mark.slow]

WORKER = Path(__file__).with_name("control_worker.py")
POSTGRES_URL = os.environ.get(
    "ANARCHON_TEST_POSTGRES_URL", "postgresql://postgres@127.0.0.1:5432/test"
)
REDIS_URL = os.environ.get("ANARCHON_TEST_REDIS_URL", "redis://127.0.0.1:6379/0")
POLL_MS = 1000
"""The workers' trigger_poll."""
TRIGGER_DELAY_MS = POLL_MS + 1500
"""The stated delay: a trigger is claimed within one poll (plus the claim's own time, with a
margin for a loaded machine)."""


def _with_prefix(url: str, prefix: str) -> str:
    return f"{url}{'&' if '?' in url else '?'}prefix={prefix}"


class Fleet:
    def __init__(self, tmp_path: Path, url: str) -> None:
        self.url = url
        self.tmp = tmp_path
        self.journal = tmp_path / "journal.db"
        self.procs: list[subprocess.Popen[str]] = []

    def start(self, count: int) -> None:
        for n in range(count):
            with (self.tmp / f"worker-{n}.log").open("w") as stderr:
                proc = subprocess.Popen(
                    [sys.executable, WORKER, self.url, self.journal],
                    stdout=subprocess.PIPE,
                    stderr=stderr,
                    text=True,
                )
            self.procs.append(proc)
        for proc in self.procs:
            assert proc.stdout is not None
            assert proc.stdout.readline().strip() == "ready", self.logs()

    @property
    def pids(self) -> set[int]:
        return {p.pid for p in self.procs}

    def cli(self, *args: str, timeout: float = 60) -> subprocess.CompletedProcess[str]:
        """The real ``anarchon`` command, as an operator runs it."""
        return subprocess.run(
            [sys.executable, "-m", "anarchon.cli", *args],
            capture_output=True,
            text=True,
            timeout=timeout,
            check=False,
        )

    def rows(self, sql: str) -> list[tuple[Any, ...]]:
        if not self.journal.exists():
            return []
        db = sqlite3.connect(self.journal, timeout=30)
        try:
            return list(db.execute(sql))
        except sqlite3.OperationalError:
            return []
        finally:
            db.close()

    def store_call(self, call: Callable[[Any], Any]) -> Any:
        async def main() -> Any:
            async with anarchon.connect(self.url) as store:
                return await call(store)

        return asyncio.run(main())

    def history(self, job: str) -> list[RunRecord]:
        records: list[RunRecord] = self.store_call(lambda s: s.history(job, 1000))
        return sorted(records, key=lambda r: r.slot)

    def logs(self) -> str:
        return "\n".join(p.read_text()[-3000:] for p in sorted(self.tmp.glob("worker-*.log")))

    def stop(self) -> None:
        for proc in self.procs:
            if proc.poll() is None:
                proc.send_signal(signal.SIGTERM)
        for proc in self.procs:
            try:
                proc.wait(15)
            except subprocess.TimeoutExpired:
                os.kill(proc.pid, signal.SIGKILL)
                proc.wait()
            if proc.stdout is not None:
                proc.stdout.close()

    def wait_until(self, condition: Callable[[], bool], timeout: float, what: str) -> None:
        deadline = time.monotonic() + timeout
        while not condition():
            if time.monotonic() > deadline:
                pytest.fail(f"timed out after {timeout} s waiting for {what}\n{self.logs()}")
            time.sleep(0.1)


def _store_url(kind: str, tmp_path: Path) -> str:
    prefix = f"ctl{uuid.uuid4().hex[:10]}"
    if kind == "sqlite":
        pytest.importorskip("anarchon_sqlite")
        return f"sqlite:///{tmp_path / 'store.db'}"
    if kind == "postgres":
        pytest.importorskip("anarchon_postgres")
        return _with_prefix(POSTGRES_URL, prefix)
    pytest.importorskip("anarchon_redis")
    url = _with_prefix(REDIS_URL, prefix)
    return url if kind == "redis-lease" else f"{url}&strategy=script"


@pytest.fixture(
    params=[
        "sqlite",
        pytest.param("postgres", marks=pytest.mark.services),
        pytest.param("redis-lease", marks=pytest.mark.services),
        pytest.param("redis-script", marks=pytest.mark.services),
    ]
)
def fleet(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[Fleet]:
    url = _store_url(request.param, tmp_path)
    capabilities = create_store(url).capabilities
    if not (capabilities.pause and capabilities.trigger):
        pytest.skip(f"{request.param}: the store does not offer pause and trigger yet")
    try:
        asyncio.run(_ping(url))
    except anarchon.StoreUnavailable as exc:
        pytest.skip(f"{request.param} is not reachable: {exc}")
    f = Fleet(tmp_path, url)
    yield f
    f.stop()


async def _ping(url: str) -> None:
    async with anarchon.connect(url) as store:
        await store.now_ms()


def test_pause_stops_the_job_on_every_instance_within_a_slot_and_resume_brings_it_back(
    fleet: Fleet,
) -> None:
    fleet.start(3)
    started_ms = time.time_ns() // 1_000_000
    fleet.wait_until(
        lambda: (
            len(fleet.rows(f"SELECT slot FROM runs WHERE job = 'tick' AND slot > {started_ms}"))
            >= 2
        ),
        20,
        "two runs of tick before the pause",
    )

    done = fleet.cli("pause", fleet.url, "tick", "--reason", "fleet test")
    assert done.returncode == 0, done.stderr
    assert "paused job 'tick'" in done.stdout
    [pause] = fleet.store_call(lambda s: s.pauses())
    assert (pause.job, pause.reason) == ("tick", "fleet test")
    after = pause.since_ms + 1000  # the pause was written, plus one slot

    def paused_slots() -> list[RunRecord]:
        return [r for r in fleet.history("tick") if r.slot > after]

    fleet.wait_until(lambda: len(paused_slots()) >= 3, 15, "three slots decided while paused")
    skipped = paused_slots()
    assert all(r.status is RunStatus.SKIPPED for r in skipped), skipped
    assert {r.error for r in skipped} == {"paused: fleet test"}, skipped
    assert fleet.rows(f"SELECT slot, pid FROM runs WHERE job = 'tick' AND slot > {after}") == []
    told = fleet.rows(
        "SELECT DISTINCT pid FROM claims WHERE job = 'tick' AND outcome = 'skipped' "
        "AND reason = 'paused: fleet test'"
    )
    assert {pid for (pid,) in told} == fleet.pids, "an instance was never told of the pause"
    status = fleet.cli("status", fleet.url, "--once")
    assert status.returncode == 0, status.stderr
    assert "paused" in status.stdout and "fleet test" in status.stdout

    resumed = fleet.cli("resume", fleet.url, "tick")
    assert resumed.returncode == 0, resumed.stderr
    resumed_ms: int = fleet.store_call(lambda s: s.now_ms())
    fleet.wait_until(
        lambda: bool(fleet.rows(f"SELECT 1 FROM runs WHERE job = 'tick' AND slot > {resumed_ms}")),
        15,
        "a run of tick after the resume",
    )
    fleet.stop()
    assert [p.returncode for p in fleet.procs] == [0, 0, 0], fleet.logs()

    # The ledger: every slot from the first to the last has exactly one record, and no slot
    # ran twice.
    ledger = [r.slot for r in fleet.history("tick")]
    assert len(ledger) == len(set(ledger)), f"a slot has two records: {ledger}"
    assert ledger == list(range(ledger[0], ledger[-1] + 1, 1000)), f"a slot is missing: {ledger}"
    ran = [slot for (slot,) in fleet.rows("SELECT slot FROM runs WHERE job = 'tick'")]
    assert len(ran) == len(set(ran)), f"a slot ran twice: {sorted(ran)}"


def test_trigger_runs_the_job_exactly_once_within_one_poll(fleet: Fleet) -> None:
    fleet.start(3)
    done = fleet.cli("trigger", fleet.url, "yearly", "--reason", "fleet test", "--wait", "20")
    assert done.returncode == 0, f"{done.stdout}\n{done.stderr}\n{fleet.logs()}"
    found = re.search(r"slot (\d+)", done.stdout)
    assert found is not None, done.stdout
    slot = int(found.group(1))
    assert slot % 1000 != 0
    leases = create_store(fleet.url).capabilities.leases
    if leases:
        assert re.search(r"succeeded on pid-\d+ \(attempt 1\)", done.stdout), done.stdout
    else:  # the store records who claimed a run, not how it ended
        assert re.search(r"claimed by pid-\d+; this store records no result", done.stdout)

    # Every instance claimed it (one won), and then nobody else ran it.
    def claimants() -> set[int]:
        rows = fleet.rows(f"SELECT pid FROM claims WHERE job = 'yearly' AND slot = {slot}")
        return {pid for (pid,) in rows}

    fleet.wait_until(lambda: claimants() == fleet.pids, 10, "each instance's claim")
    won = fleet.rows(
        f"SELECT pid FROM claims WHERE job = 'yearly' AND slot = {slot} AND outcome = 'won'"
    )
    assert len(won) == 1, won
    fleet.stop()
    runs = fleet.rows("SELECT slot, triggered, pid FROM runs WHERE job = 'yearly'")
    assert runs == [(slot, 1, won[0][0])], runs
    [record] = fleet.history("yearly")
    status = RunStatus.SUCCEEDED if leases else RunStatus.CLAIMED
    assert (record.slot, record.status, record.attempt) == (slot, status, 1)
    assert record.holder == f"pid-{won[0][0]}"
    assert record.claimed_at is not None
    assert record.claimed_at - slot <= TRIGGER_DELAY_MS, record
    history = fleet.cli("history", fleet.url, "yearly", "--json")
    assert '"triggered": true' in history.stdout, history.stdout
