"""Sync `anarchon.once` across real processes: one body per slot (C1), one connection per process
and URL however many blocks use it, a fork child that opens its own."""

from __future__ import annotations

import asyncio
import shutil
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

import anarchon
from anarchon import RunStatus
from anarchon_test_support.processes import finish, go, wait_ready, worker_processes

pytest.importorskip("anarchon_sqlite")
pytestmark = pytest.mark.processes

WORKER = Path(__file__).with_name("once_worker.py")


def run_worker(*args: object, timeout: float = 60) -> dict[str, object]:
    out = subprocess.run(
        [sys.executable, str(WORKER), *map(str, args)],
        capture_output=True,
        text=True,
        timeout=timeout,
        check=False,
    )
    assert out.returncode == 0, out.stderr
    result: dict[str, object] = __import__("json").loads(out.stdout.strip().splitlines()[-1])
    return result


async def history(url: str, job: str) -> list[anarchon.RunRecord]:
    async with anarchon.connect(url) as store:
        return await store.history(job, 100)


def test_C1_three_processes_one_slot_one_body(tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path / 'store.db'}"
    journal = tmp_path / "journal.txt"
    slot = time.time_ns() // 1_000_000 // 1000 * 1000
    with worker_processes(WORKER, 3, "race", url, "report", slot, journal) as procs:
        wait_ready(procs)
        go(procs)
        results = [finish(proc, timeout=60) for proc in procs]
    winners = [r["pid"] for r in results if r["won"]]
    assert len(winners) == 1, results
    assert journal.read_text().splitlines() == [f"{winners[0]} {slot} 1"]
    (record,) = asyncio.run(history(url, "report"))
    assert (record.slot, record.status, record.attempt) == (slot, RunStatus.SUCCEEDED, 1)
    assert record.holder.split(":")[1] == str(winners[0])


def test_a_fork_child_opens_its_own_store_and_the_parent_keeps_its_own(tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path / 'store.db'}"
    result = run_worker("fork", url, "forked")
    assert result["first"] == "parent-before"
    assert result["child_exit"] == 0, "the child's block did not win its own slot"
    assert result["parent_after"] is True
    history = result["history"]
    assert isinstance(history, list)
    assert [status for _, status, _ in history] == ["succeeded"] * 3
    holders = {slot: holder for slot, _, holder in history}
    pids = {slot: holder.split(":")[1] for slot, holder in holders.items()}
    parent_pids = {pids[min(pids)], pids[max(pids)]}
    child_pid = sorted(pids.items())[1][1]
    assert len(parent_pids) == 1 and child_pid not in parent_pids, holders


def test_the_lease_is_renewed_while_the_sync_body_runs(tmp_path: Path) -> None:
    result = run_worker("heartbeat", f"sqlite:///{tmp_path / 'store.db'}", "long")
    assert result["held"] is True, "the run was fenced: no heartbeat renewed its 1 s lease"
    history = result["history"]
    assert isinstance(history, list) and [h[1] for h in history] == ["succeeded"]


# -- one connection per process and URL, counted by a Redis server of the test's own ------------


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port: int = s.getsockname()[1]
        return port


@pytest.fixture
def redis_url(tmp_path: Path) -> Iterator[str]:
    """A private redis-server on a free port: its connection counter is the test's alone."""
    pytest.importorskip("anarchon_redis")
    binary = shutil.which("redis-server")
    if binary is None:
        pytest.skip("redis-server is not installed")
    port = free_port()
    proc = subprocess.Popen(
        [binary, "--port", str(port), "--bind", "127.0.0.1", "--save", "", "--appendonly", "no"],
        cwd=tmp_path,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    try:
        deadline = time.monotonic() + 10
        while True:
            try:
                socket.create_connection(("127.0.0.1", port), timeout=1).close()
                break
            except OSError:
                if time.monotonic() > deadline:
                    pytest.fail("private redis-server did not start")
                time.sleep(0.02)
        yield f"redis://127.0.0.1:{port}/0"
    finally:
        proc.terminate()
        proc.wait(10)


def connections_received(url: str) -> int:
    """The server's count of connections ever accepted (this one included)."""
    import redis

    client = redis.Redis.from_url(url)
    try:
        return int(client.info("stats")["total_connections_received"])
    finally:
        client.close()


@pytest.mark.services
def test_fifty_sync_blocks_open_as_many_connections_as_one(redis_url: str) -> None:
    before = connections_received(redis_url)
    assert run_worker("reuse", redis_url, "one", 1) == {"won": 1}
    one_open = connections_received(redis_url) - before - 1  # minus the counting connection
    assert one_open >= 1

    before = connections_received(redis_url)
    assert run_worker("reuse", redis_url, "fifty", 50) == {"won": 50}
    assert connections_received(redis_url) - before - 1 == one_open

    # The counter counts opens: async blocks given a URL open the store each time.
    before = connections_received(redis_url)
    assert run_worker("async", redis_url, "async", 5) == {"won": 5}
    assert connections_received(redis_url) - before - 1 == 5 * one_open
