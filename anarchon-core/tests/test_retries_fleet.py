"""Retries across a fleet (issue #26 item 4, rule L12): three real scheduler processes
(retry_worker.py) share a store, on SQLite, PostgreSQL and Redis (``strategy=lease``). Every
slot's fate is counted against the processes' own journal:

- ``flaky`` fails twice then succeeds: one record per slot, succeeded at attempt 3, its error
  the log of both failures; the journal has attempts 1, 2 and 3 once each (nothing ran twice);
- ``broken`` always fails with ``retries=2``: failed after exactly 3 tries, all three logged;
- ``late`` would retry after its next slot: never retried, failed at attempt 1.
"""

from __future__ import annotations

import asyncio
import os
import signal
import sqlite3
import subprocess
import sys
import time
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest

import anarchon
from anarchon import RunRecord, RunStatus

pytestmark = [pytest.mark.processes, pytest.mark.slow]

WORKER = Path(__file__).with_name("retry_worker.py")
POSTGRES_URL = os.environ.get(
    "ANARCHON_TEST_POSTGRES_URL", "postgresql://postgres@127.0.0.1:5432/test"
)
REDIS_URL = os.environ.get("ANARCHON_TEST_REDIS_URL", "redis://127.0.0.1:6379/0")
SLOTS = 2
"""How many decided slots of each 2-second job the test waits for."""


def _store_url(kind: str, tmp_path: Path) -> str:
    prefix = f"retry{uuid.uuid4().hex[:10]}"
    if kind == "sqlite":
        pytest.importorskip("anarchon_sqlite")
        return f"sqlite:///{tmp_path / 'store.db'}"
    if kind == "postgres":
        pytest.importorskip("anarchon_postgres")
        return f"{POSTGRES_URL}?prefix={prefix}"
    pytest.importorskip("anarchon_redis")
    return f"{REDIS_URL}?prefix={prefix}"


class Fleet:
    def __init__(self, tmp_path: Path, url: str) -> None:
        self.url = url
        self.tmp = tmp_path
        self.journal = tmp_path / "journal.db"
        self.procs: list[subprocess.Popen[str]] = []

    def start(self, count: int) -> None:
        for n in range(count):
            with (self.tmp / f"worker-{n}.log").open("w") as stderr:
                self.procs.append(
                    subprocess.Popen(
                        [sys.executable, WORKER, self.url, self.journal],
                        stdout=subprocess.PIPE,
                        stderr=stderr,
                        text=True,
                    )
                )
        for proc in self.procs:
            assert proc.stdout is not None
            assert proc.stdout.readline().strip() == "ready", self.logs()

    def tries(self, job: str) -> dict[int, list[int]]:
        """Per slot, the attempts the processes ran, from their journal."""
        if not self.journal.exists():
            return {}
        db = sqlite3.connect(self.journal, timeout=30)
        try:
            rows = db.execute("SELECT slot, attempt FROM runs WHERE job = ?", (job,)).fetchall()
        except sqlite3.OperationalError:
            return {}
        finally:
            db.close()
        tries: dict[int, list[int]] = {}
        for slot, attempt in rows:
            tries.setdefault(slot, []).append(attempt)
        return {slot: sorted(attempts) for slot, attempts in tries.items()}

    def history(self, job: str) -> dict[int, RunRecord]:
        async def read() -> list[RunRecord]:
            async with anarchon.connect(self.url) as store:
                return await store.history(job, 1000)

        return {r.slot: r for r in asyncio.run(read())}

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


@pytest.fixture(
    params=[
        "sqlite",
        pytest.param("postgres", marks=pytest.mark.services),
        pytest.param("redis-lease", marks=pytest.mark.services),
    ]
)
def fleet(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[Fleet]:
    url = _store_url(request.param, tmp_path)
    f = Fleet(tmp_path, url)
    yield f
    f.stop()


def log(*failures: str) -> str:
    return " | ".join(f"attempt {n} failed: RuntimeError: {text}" for n, text in failures)


def test_a_failed_run_is_retried_once_per_try_across_the_fleet(fleet: Fleet) -> None:
    fleet.start(3)
    since = time.time_ns() // 1_000_000  # slots after every process started

    def decided(job: str) -> dict[int, RunRecord]:
        return {
            slot: r for slot, r in fleet.history(job).items() if slot > since and r.status.finished
        }

    deadline = time.monotonic() + 30
    while len(decided("flaky")) < SLOTS or len(decided("broken")) < SLOTS:
        if time.monotonic() > deadline:
            pytest.fail(f"{SLOTS} decided slots of flaky and broken within 30 s\n{fleet.logs()}")
        time.sleep(0.2)
    fleet.stop()
    for job, attempts, status, error in [
        ("flaky", 3, RunStatus.SUCCEEDED, log((1, "flaky attempt 1"), (2, "flaky attempt 2"))),
        (
            "broken",
            3,
            RunStatus.FAILED,
            log((1, "broken attempt 1"), (2, "broken attempt 2"), (3, "broken attempt 3")),
        ),
        ("late", 1, RunStatus.FAILED, log((1, "late"))),
    ]:
        records, tries = decided(job), fleet.tries(job)
        assert len(records) >= SLOTS, (job, records)
        for slot, record in records.items():
            assert (record.status, record.attempt, record.error) == (status, attempts, error), (
                f"{job}@{slot}: {record}\n{fleet.logs()}"
            )
            assert tries.get(slot) == list(range(1, attempts + 1)), (
                f"{job}@{slot}: each try ran exactly once, got attempts {tries.get(slot)}"
            )
