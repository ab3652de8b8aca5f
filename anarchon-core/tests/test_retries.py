"""Retries (`retries=`, `backoff=`, rule L12) in one process: the settings are checked, a store
that cannot keep a failed run for its retry refuses the job at start, a lone instance retries
its own failed run after the backoff (it watches with a new token), a timeout is not retried,
and a retry that would start after the job's next slot is not made. Across processes and
stores: test_retries_fleet.py."""

from __future__ import annotations

import asyncio
import itertools
import time

import attrs
import pytest

from anarchon import (
    Backoff,
    Capabilities,
    ConfigError,
    MemoryStore,
    Run,
    RunRecord,
    RunStatus,
    Scheduler,
)
from anarchon_test_support import eventually


@pytest.mark.parametrize(
    ("settings", "message"),
    [
        ({"retries": -1}, "retries must be an int from 0 to 100, got -1"),
        ({"retries": 101}, "retries must be an int from 0 to 100"),
        ({"retries": True}, "retries must be an int"),
        ({"retries": 1, "backoff": "0s"}, "backoff must be positive"),
        ({"retries": 1, "backoff": {"first": "1s", "max": "10ms"}}, "max .* is below first"),
        ({"retries": 1, "backoff": {"wait": "1s"}}, "backoff takes 'first', 'factor' and 'max'"),
        ({"retries": 1, "backoff": 1.5}, "backoff must be a duration"),
    ],
)
def test_retries_and_backoff_are_validated(settings: dict[str, object], message: str) -> None:
    s = Scheduler(MemoryStore.create(), environ={})
    with pytest.raises(ConfigError, match=f"job 'tick': .*{message}"):
        s.add_job(lambda: None, "* * * * *", name="tick", **settings)


def test_retries_default_to_none_and_leave_room_in_the_attempts() -> None:
    s = Scheduler(MemoryStore.create(), environ={})
    plain = s.add_job(lambda: None, "* * * * *", name="plain")
    assert (plain.retries, plain.claim_attempts, plain.backoff) == (0, 3, Backoff())
    spec = s.add_job(lambda: None, "* * * * *", name="r", retries=2, backoff="250ms")
    assert (spec.retries, spec.claim_attempts) == (2, 5)
    assert [spec.backoff.delay_ms(n) for n in (1, 2)] == [250, 250]


class NoRetryMemory(MemoryStore):
    """A memory store that says it cannot keep a failed run for a retry."""

    @property
    def capabilities(self) -> Capabilities:
        return attrs.evolve(super().capabilities, retries=False)


async def test_a_store_without_retries_refuses_the_job_at_start() -> None:
    s = Scheduler(NoRetryMemory.create("no-retries"), environ={})
    s.add_job(lambda: None, "* * * * *", name="flaky", retries=1)
    with pytest.raises(ConfigError, match=r"job 'flaky': retries=1 needs .*memory://no-retries"):
        await s.start()


async def finished(store: MemoryStore, job: str, slot: int | None = None) -> RunRecord:
    """The job's run at `slot` (None: its newest that ran and finished) once it is finished."""
    while True:
        for run in await store.history(job, 10):
            ran = run.status.finished and run.status is not RunStatus.SKIPPED
            if ran and slot in (None, run.slot):
                return run
        await asyncio.sleep(0.02)


@pytest.mark.slow  # waits for the next whole second, then the backoffs
async def test_a_lone_instance_retries_its_own_failed_run_after_the_backoff() -> None:
    store = MemoryStore.create("retry-alone")
    s = Scheduler(MemoryStore.create("retry-alone"), instance="alone", environ={})
    tries: list[tuple[int, int, float]] = []

    @s.job("* * * * * *", name="flaky", lease="5s", retries=2, backoff="150ms")
    def flaky(run: Run) -> None:
        tries.append((run.slot, run.attempt, time.monotonic()))
        if run.attempt < 3:
            raise ValueError(f"boom {run.attempt}")

    async with s:
        await eventually(lambda: any(a == 3 for _, a, _ in tries), 5, "attempt 3")
        slot = next(slot for slot, a, _ in tries if a == 3)
        done = await asyncio.wait_for(finished(store, "flaky", slot), 5)
    assert (done.status, done.attempt, done.holder) == (RunStatus.SUCCEEDED, 3, "alone")
    assert (
        done.error == "attempt 1 failed: ValueError: boom 1 | attempt 2 failed: ValueError: boom 2"
    )
    times = [t for sl, _, t in tries if sl == slot]
    assert [a for sl, a, _ in tries if sl == slot] == [1, 2, 3]
    gaps = [b - a for a, b in itertools.pairwise(times)]
    # Each retry waited its backoff, and the lone instance took it soon after (not a heartbeat
    # of 5 s / 3 later).
    assert all(0.14 <= gap < 1.0 for gap in gaps), gaps


@pytest.mark.slow  # waits for the next whole second
async def test_a_timeout_is_not_retried_and_a_late_retry_is_not_made() -> None:
    store = MemoryStore.create("retry-not")
    s = Scheduler(MemoryStore.create("retry-not"), instance="a", environ={})
    tries: list[tuple[str, int, int]] = []

    @s.job("* * * * * *", name="slow", lease="5s", timeout="100ms", retries=2, backoff="10ms")
    async def slow(run: Run) -> None:
        tries.append(("slow", run.slot, run.attempt))
        await asyncio.sleep(10)

    @s.job("* * * * * *", name="late", lease="5s", retries=2, backoff="2s")
    def late(run: Run) -> None:
        tries.append(("late", run.slot, run.attempt))
        raise ValueError("late")

    async with s:
        slow_run = await asyncio.wait_for(finished(store, "slow"), 5)
        late_run = await asyncio.wait_for(finished(store, "late"), 5)
    # Finished at attempt 1: a run kept for a retry stays running until its last try ends.
    assert (slow_run.status, slow_run.attempt) == (RunStatus.FAILED, 1)
    assert slow_run.error == "attempt 1 failed: timeout: ran longer than 100ms"
    assert (late_run.status, late_run.attempt) == (RunStatus.FAILED, 1)
    assert late_run.error == "attempt 1 failed: ValueError: late"
    for job, run in (("slow", slow_run), ("late", late_run)):
        assert [a for j, sl, a in tries if j == job and sl == run.slot] == [1], tries


def test_the_dashboard_tells_a_retry_from_a_takeover() -> None:
    """A cell's tooltip says ``tried again`` and lists the failed tries of a retried run, and
    ``taken over`` for a run taken over after a crash (no try log)."""
    from anarchon.dashboard._view import _cell

    base = {"job": "sync", "slot": 1_796_000_000_000, "token": "t", "holder": "web-2"}
    log = "attempt 1 failed: OSError: down | attempt 2 failed: OSError: down"
    retried = RunRecord(**base, status=RunStatus.SUCCEEDED, attempt=3, error=log)
    crashed = RunRecord(**base, status=RunStatus.SUCCEEDED, attempt=2)
    lines = _cell(retried).title.splitlines()
    assert "tried again: attempt 3" in lines and f"failed tries: {log}" in lines, lines
    assert "taken over: attempt 2" in _cell(crashed).title.splitlines()
    assert "failed tries" not in _cell(crashed).title
