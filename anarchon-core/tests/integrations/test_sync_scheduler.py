"""`scheduler.start()` and `shutdown()` from sync code: the scheduler on its own loop thread,
errors of the start in the caller, start twice, `health()` from any thread, forks, and the
handover at interpreter exit."""

from __future__ import annotations

import asyncio
import json
import subprocess
import sys
import threading
import time
from collections.abc import Callable
from pathlib import Path

import pytest

import anarchon
from anarchon import RunStatus

pytest.importorskip("anarchon_sqlite")

WORKER = Path(__file__).with_name("sync_scheduler_worker.py")


def wait_until(condition: Callable[[], bool], timeout: float = 10, what: str = "") -> None:
    deadline = time.monotonic() + timeout
    while not condition():
        if time.monotonic() > deadline:
            pytest.fail(f"timed out after {timeout} s waiting for {what or condition}")
        time.sleep(0.01)


def in_thread(func: Callable[[], object]) -> object:
    """`func()` in a new (non-main) thread; its result, or its exception raised here."""
    outcome: dict[str, object] = {}

    def target() -> None:
        try:
            outcome["result"] = func()
        except BaseException as exc:  # noqa: BLE001 - handed to the test
            outcome["error"] = exc

    thread = threading.Thread(target=target)
    thread.start()
    thread.join(60)
    assert not thread.is_alive()
    if "error" in outcome:
        raise outcome["error"]  # type: ignore[misc]
    return outcome.get("result")


def scheduler_threads() -> list[threading.Thread]:
    return [t for t in threading.enumerate() if t.name.startswith("anarchon-scheduler-")]


async def history(url: str, job: str) -> list[anarchon.RunRecord]:
    async with anarchon.connect(url) as store:
        return await store.history(job, 100)


def test_start_and_shutdown_from_a_thread_with_health_from_another(tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path / 'store.db'}"
    scheduler = anarchon.Scheduler(url, instance="threads", grace="1s")
    ran: list[int] = []

    @scheduler.job("* * * * * *")
    def tick(run: anarchon.Run) -> None:
        ran.append(run.slot)

    assert in_thread(scheduler.start) is not None  # an awaitable that is already done
    try:
        (thread,) = scheduler_threads()
        assert thread.daemon
        wait_until(lambda: len(ran) >= 2, what="two slots run")
        in_thread(scheduler.start)  # idempotent: no second thread, no second run per slot
        assert scheduler_threads() == [thread]
        health = in_thread(scheduler.health)
        assert isinstance(health, anarchon.Health)
        assert health.started and health.ready and "tick" in health.last_claims
    finally:
        in_thread(scheduler.shutdown)
    assert scheduler_threads() == []
    assert not scheduler.health().started
    count = len(ran)
    records = asyncio.run(history(url, "tick"))
    # On a loaded machine the first slot may be reached late and recorded skipped (T6, S1);
    # every other record is a run this scheduler made, and each run is recorded.
    runs = [r for r in records if not (r.status is RunStatus.SKIPPED and r.slot < min(ran))]
    assert sorted(r.slot for r in runs) == sorted(ran)
    assert len(set(ran)) == count, "a slot ran twice"
    assert {r.status for r in runs} == {RunStatus.SUCCEEDED}


def test_start_errors_raise_in_the_caller_and_leave_no_thread(tmp_path: Path) -> None:
    scheduler = anarchon.Scheduler(f"sqlite:///{tmp_path / 'missing' / 'store.db'}")

    @scheduler.job("* * * * *")
    def job() -> None: ...

    with pytest.raises(anarchon.ConfigError, match=r"directory .* does not exist"):
        in_thread(scheduler.start)
    assert scheduler_threads() == []
    assert not scheduler.health().started
    scheduler.shutdown()  # not running: nothing to do


def test_await_start_in_async_code_stays_on_the_callers_loop(tmp_path: Path) -> None:
    scheduler = anarchon.Scheduler(f"sqlite:///{tmp_path / 'store.db'}", instance="async")

    async def main() -> bool:
        await scheduler.start()
        try:
            return scheduler.health().started and scheduler_threads() == []
        finally:
            await scheduler.stop()

    assert asyncio.run(main())


def run_worker(*args: object) -> dict[str, object]:
    out = subprocess.run(
        [sys.executable, str(WORKER), *map(str, args)],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert out.returncode == 0, out.stderr
    result: dict[str, object] = json.loads(out.stdout.strip().splitlines()[-1])
    return result


@pytest.mark.processes
def test_a_started_scheduler_fails_loudly_after_fork_and_one_started_after_works(
    tmp_path: Path,
) -> None:
    journal = tmp_path / "journal.txt"
    result = run_worker("fork", f"sqlite:///{tmp_path / 'store.db'}", journal)
    lines = journal.read_text().splitlines()
    assert result["child_exit"] == 0, lines
    assert result["parent_ready_after_fork"] is True
    assert result["parent_started_after_shutdown"] is False
    assert any(" child-tick " in line for line in lines), "the child's own scheduler ran"


@pytest.mark.processes
def test_interpreter_exit_stops_a_forgotten_scheduler_with_the_handover(tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path / 'store.db'}"
    journal = tmp_path / "journal.txt"
    assert run_worker("forget", url, journal) == {"exiting": True}
    after_exit_ms = time.time_ns() // 1_000_000
    lines = journal.read_text().splitlines()
    (started,) = [line.split()[2] for line in lines if line.split()[1] == "started"]
    fenced = [line for line in lines if line.split()[1] == "fenced"]
    assert len(fenced) == 1 and "shutting down; the lease was released" in fenced[0], lines
    records = {r.slot: r for r in asyncio.run(history(url, "long"))}
    released = records[int(started)]
    # L9: released, not left to run out (a lease is 60 s by default): it ended before the
    # process did, and attempt 2 may be claimed at once.
    assert released.status is RunStatus.RUNNING and released.attempt == 1
    assert released.lease_until is not None and released.lease_until < after_exit_ms
    others = [r for slot, r in records.items() if slot != int(started)]
    assert all(r.status is RunStatus.SKIPPED for r in others)
