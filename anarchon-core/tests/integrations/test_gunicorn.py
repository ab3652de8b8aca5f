"""Two gunicorn sync workers each start the scheduler (`post_worker_init`): every slot runs once
across them, and SIGTERM to gunicorn stops both with the handover (L9)."""

from __future__ import annotations

import asyncio
import os
import secrets
import signal
import socket
import subprocess
import sys
import time
import urllib.request
from collections import Counter
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

import anarchon
from anarchon import RunStatus

pytest.importorskip("gunicorn")
pytest.importorskip("anarchon_sqlite")
pytestmark = pytest.mark.processes

HERE = Path(__file__).parent
RUN_FOR_SLOTS = 10


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port: int = s.getsockname()[1]
        return port


def wait_until(condition: Callable[[], bool], timeout: float, what: str) -> None:
    deadline = time.monotonic() + timeout
    while not condition():
        if time.monotonic() > deadline:
            pytest.fail(f"timed out after {timeout} s waiting for {what}")
        time.sleep(0.05)


class Journal:
    def __init__(self, path: Path) -> None:
        self.path = path

    def events(self) -> list[list[str]]:
        """Each line split: ``[pid, event, *details]``."""
        if not self.path.exists():
            return []
        return [line.split(" ", 3) for line in self.path.read_text().splitlines()]

    def pids(self, event: str) -> list[str]:
        return [e[0] for e in self.events() if e[1] == event]

    def slots(self, event: str) -> list[int]:
        return [int(e[2]) for e in self.events() if e[1] == event]


@pytest.fixture(
    params=[
        pytest.param("sqlite", id="sqlite"),
        pytest.param("redis", id="redis", marks=pytest.mark.services),
    ]
)
def store_url(request: pytest.FixtureRequest, tmp_path: Path) -> str:
    if request.param == "sqlite":
        return f"sqlite:///{tmp_path / 'store.db'}"
    pytest.importorskip("anarchon_redis")
    return f"redis://127.0.0.1:6379/0?prefix=gunicorn{secrets.token_hex(4)}"


@pytest.fixture
def gunicorn(tmp_path: Path, store_url: str) -> Iterator[tuple[subprocess.Popen[bytes], int]]:
    port = free_port()
    env = {
        **os.environ,
        "ANARCHON_TEST_STORE": store_url,
        "ANARCHON_TEST_JOURNAL": str(tmp_path / "journal.txt"),
    }
    with (tmp_path / "gunicorn.log").open("wb") as log:
        proc = subprocess.Popen(
            [
                sys.executable,
                "-m",
                "gunicorn",
                "--workers=2",
                "--worker-class=sync",
                f"--bind=127.0.0.1:{port}",
                f"--config={HERE / 'gunicorn_conf.py'}",
                f"--chdir={HERE}",
                "--no-control-socket",  # else it lives in the home directory, shared
                "gunicorn_app:app",
            ],
            env=env,
            stdout=log,
            stderr=subprocess.STDOUT,
        )
    try:
        yield proc, port
    finally:
        if proc.poll() is None:
            proc.kill()
        proc.wait()


async def history(url: str, job: str) -> list[anarchon.RunRecord]:
    async with anarchon.connect(url) as store:
        return await store.history(job, 1000)


def test_two_sync_workers_run_every_slot_once_and_hand_over_on_sigterm(
    gunicorn: tuple[subprocess.Popen[bytes], int], tmp_path: Path, store_url: str
) -> None:
    proc, port = gunicorn
    journal = Journal(tmp_path / "journal.txt")
    log = tmp_path / "gunicorn.log"
    wait_until(lambda: len(set(journal.pids("ready"))) == 2, 30, f"two workers ready: {log}")
    workers = set(journal.pids("ready"))
    with urllib.request.urlopen(f"http://127.0.0.1:{port}/", timeout=10) as response:
        answer = response.read().decode()
    assert '"ready": true' in answer, answer

    first = max(journal.slots("tick"), default=0)
    wait_until(
        lambda: len([s for s in journal.slots("tick") if s > first]) >= RUN_FOR_SLOTS,
        RUN_FOR_SLOTS + 15,
        f"{RUN_FOR_SLOTS} slots of tick",
    )
    assert journal.slots("long-started"), "long started"
    proc.send_signal(signal.SIGTERM)
    assert proc.wait(30) == 0, log.read_text()
    after_exit_ms = time.time_ns() // 1_000_000

    # Every slot once: no tick slot twice, none missing between the first and the last.
    ticks = journal.slots("tick")
    assert [s for s, n in Counter(ticks).items() if n > 1] == [], "a slot ran twice"
    assert sorted(ticks) == list(range(min(ticks), max(ticks) + 1, 1000)), "a slot was missed"
    assert set(journal.pids("tick")) <= workers
    records = asyncio.run(history(store_url, "tick"))
    assert {r.slot for r in records} >= set(ticks)
    assert all(r.status is RunStatus.SUCCEEDED for r in records if r.slot in set(ticks))

    # The handover: both workers stopped; the long run was released, not left to its lease.
    assert sorted(journal.pids("stopped")) == sorted(workers), journal.events()
    (long_slot,) = journal.slots("long-started")
    fenced = [e for e in journal.events() if e[1] == "long-fenced"]
    assert len(fenced) == 1 and int(fenced[0][2]) == long_slot, fenced
    assert "shutting down; the lease was released" in fenced[0][3]
    longs = {r.slot: r for r in asyncio.run(history(store_url, "long"))}
    released = longs.pop(long_slot)
    assert released.status is RunStatus.RUNNING and released.attempt == 1
    assert released.lease_until is not None and released.lease_until < after_exit_ms
    assert {r.status for r in longs.values()} == {RunStatus.SKIPPED}, "overlap skipped the rest"
