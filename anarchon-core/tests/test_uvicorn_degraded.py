"""Degraded start under ``uvicorn --workers 2``: the app boots while its Redis store is down,
answers not ready, and once the test starts the store, runs every slot within max_late exactly
once across the two workers (their own journal, uvicorn_app.py) with no hole in the ledger."""

from __future__ import annotations

import asyncio
import json
import math
import os
import shutil
import signal
import socket
import sqlite3
import subprocess
import sys
import time
import urllib.error
import urllib.request
from collections import Counter
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

import anarchon
from anarchon import RunRecord, RunStatus

pytest.importorskip("fastapi")
pytest.importorskip("uvicorn")
pytest.importorskip("anarchon_redis")
pytestmark = [pytest.mark.processes, pytest.mark.services]  # a private redis-server

HERE = Path(__file__).parent
MAX_LATE_S = 3
BACKLOG_MARGIN_S = 0.5
"""A worker that connects decides the slots within max_late before then: those due up to this
much after ``connected - max_late`` (claims take time on a loaded machine)."""
SETTLE_S = 0.3
RECONNECT_S = 5.0
"""The degraded start retries the store at most this far apart."""


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def wait_for(condition: Callable[[], object], timeout: float, what: str, logs: Path) -> None:
    deadline = time.monotonic() + timeout
    while not condition():
        if time.monotonic() > deadline:
            pytest.fail(
                f"timed out after {timeout} s waiting for {what}\n{logs.read_text()[-6000:]}"
            )
        time.sleep(0.02)


def readiness(port: int) -> tuple[int, dict[str, Any]] | None:
    """``GET /readyz``: the status and body, or None while nothing answers."""
    try:
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/readyz", timeout=2) as reply:
            return reply.status, json.loads(reply.read())
    except urllib.error.HTTPError as error:
        return error.code, json.loads(error.read())
    except OSError:
        return None


class Journal:
    def __init__(self, path: Path) -> None:
        self.path = path

    def rows(self, table: str, what: str) -> list[tuple[Any, ...]]:
        db = sqlite3.connect(self.path, timeout=30)
        try:
            return list(db.execute(f"SELECT * FROM {table} WHERE what = ? ORDER BY at", (what,)))
        except sqlite3.OperationalError:  # not created yet
            return []
        finally:
            db.close()


@pytest.fixture
def redis_port(tmp_path: Path) -> Iterator[tuple[int, Callable[[], float]]]:
    """A port for a private Redis, and a function that starts it there (returns when it answers)."""
    binary = shutil.which("redis-server")
    if binary is None:
        pytest.skip("no redis-server on PATH: install redis (scripts/services)")
    port = free_port()
    servers: list[subprocess.Popen[bytes]] = []

    def start() -> float:
        args = ["--port", str(port), "--bind", "127.0.0.1", "--save", "", "--appendonly", "no"]
        args += ["--dir", str(tmp_path)]
        servers.append(subprocess.Popen([binary, *args], stdout=subprocess.DEVNULL))
        deadline = time.monotonic() + 10
        while time.monotonic() < deadline:
            try:
                with socket.create_connection(("127.0.0.1", port), 0.5) as sock:
                    sock.sendall(b"PING\r\n")
                    if sock.recv(16).startswith(b"+PONG"):
                        return time.time()
            except OSError:
                time.sleep(0.02)
        pytest.fail(f"redis-server did not answer on port {port} within 10 s")

    yield port, start
    for server in servers:
        server.terminate()
        server.wait(10)


def history(url: str) -> list[RunRecord]:
    async def read() -> list[RunRecord]:
        async with anarchon.connect(url) as store:
            return await store.history("tick", 1000)

    return asyncio.run(read())


def test_degraded_start_under_uvicorn_workers_then_every_slot_once_the_store_is_up(
    tmp_path: Path, redis_port: tuple[int, Callable[[], float]]
) -> None:
    port, start_redis = redis_port
    store = f"redis://127.0.0.1:{port}/0?prefix=app"
    journal = Journal(tmp_path / "journal.db")
    http = free_port()
    logs = tmp_path / "uvicorn.log"
    env = {
        **os.environ,
        "ANARCHON_TEST_APP_STORE": store,
        "ANARCHON_TEST_APP_JOURNAL": str(journal.path),
    }
    command = [sys.executable, "-m", "uvicorn", "uvicorn_app:app", "--app-dir", str(HERE)]
    command += ["--workers", "2", "--host", "127.0.0.1", "--port", str(http)]
    with logs.open("w") as out:
        server = subprocess.Popen(command, env=env, stdout=out, stderr=subprocess.STDOUT)
    try:
        # Booted with the store down: both workers serve, and say they are not ready.
        not_ready: set[int] = set()

        def both_answer(ready: bool, seen: set[int]) -> bool:
            answer = readiness(http)
            assert server.poll() is None, f"uvicorn exited\n{logs.read_text()[-6000:]}"
            if answer is not None:
                status, body = answer
                assert (status == 200) is body["ready"]
                if body["ready"] is ready:
                    seen.add(body["pid"])
                elif ready:
                    seen.discard(body["pid"])
            return len(seen) == 2

        wait_for(lambda: both_answer(False, not_ready), 60, "two workers not ready", logs)
        assert len(journal.rows("life", "booted")) == 2
        assert not journal.rows("life", "connected"), "a worker connected to no store"

        # Slots fall due while the store is down: two, so that catching up is exercised.
        down_until = math.floor(time.time()) + 2.2
        wait_for(lambda: time.time() >= down_until, 3, "two slots with the store down", logs)
        store_up = start_redis()
        ready: set[int] = set()
        wait_for(lambda: both_answer(True, ready), RECONNECT_S + 10, "both workers ready", logs)
        assert ready == not_ready
        connected = [at for *_, at in journal.rows("life", "connected")]
        assert len(connected) == 2
        assert max(connected) - store_up <= RECONNECT_S + 1, "a worker retried too seldom"
        last = math.ceil(time.time()) + 3
        wait_for(
            lambda: any(r[2] >= last * 1000 for r in journal.rows("runs", "ran")), 10, "runs", logs
        )
    finally:
        stopped = time.time()
        server.send_signal(signal.SIGTERM)
        try:
            server.wait(30)
        except subprocess.TimeoutExpired:
            server.kill()
            server.wait()
    assert server.returncode == 0, logs.read_text()[-6000:]

    ledger = {r.slot: r for r in history(store)}
    runs = Counter(slot for _, _, slot, _, _ in journal.rows("runs", "ran"))
    twice = sorted(slot for slot, n in runs.items() if n > 1)
    assert not twice, f"slots run more than once across the workers: {twice}"
    booted = min(at for *_, at in journal.rows("life", "booted"))
    first_run = math.ceil(min(connected) - MAX_LATE_S + BACKLOG_MARGIN_S) * 1000
    last_late = math.floor(min(connected) - MAX_LATE_S - BACKLOG_MARGIN_S) * 1000
    due = range(math.ceil(booted) * 1000, math.floor(stopped - SETTLE_S) * 1000 + 1, 1000)
    holes = [slot for slot in due if slot not in ledger]
    assert not holes, f"slots with no record: {holes}\n{logs.read_text()[-6000:]}"
    for slot in due:
        record = ledger[slot]
        if slot >= first_run:
            # Within max_late when the store answered, or due after: run, once.
            assert record.status is RunStatus.SUCCEEDED, record
            assert runs[slot] == 1, f"slot {slot} ran {runs[slot]} times by the journal"
        elif slot <= last_late:
            # Fell due while the app was up but the store down, too long ago: on record, not run.
            assert record.status is RunStatus.SKIPPED, record
            assert (record.error or "").startswith("late:"), record
            assert runs[slot] == 0, f"slot {slot} was recorded late but ran"
    assert {r.holder for r in ledger.values() if r.status is RunStatus.SUCCEEDED} <= {
        f"pid-{pid}" for pid in ready
    }
