"""Run timeouts (`timeout=`, issue #26): a run that takes longer is fenced (an async job is
cancelled; a sync job sees `run.fenced` and `ensure_held()` raise) and recorded failed with a
greppable reason, its lease over, so no backup takes it over and the job's next slot is not
blocked. In one process on memory:// and SQLite (and a no-lease Redis store), then with two
scheduler processes on one SQLite file."""

from __future__ import annotations

import asyncio
import logging
import os
import signal
import sqlite3
import subprocess
import sys
import threading
import time
from collections.abc import AsyncIterator, Iterator
from pathlib import Path
from typing import ClassVar

import pytest

import anarchon
from anarchon import (
    ClaimRequest,
    ConfigError,
    Fenced,
    MemoryStore,
    Outcome,
    Run,
    RunRecord,
    RunStatus,
    Scheduler,
    StoreUnavailable,
    hookimpl,
)
from anarchon.plugins import plugin_manager
from anarchon_test_support import eventually

WORKER = Path(__file__).with_name("timeout_worker.py")


class Recorder:
    def __init__(self) -> None:
        self.fenced: list[tuple[str, int, str]] = []
        self.finished: list[tuple[str, int, RunStatus, str | None]] = []

    @hookimpl
    def anarchon_run_fenced(self, job: str, slot: int, reason: str) -> None:
        self.fenced.append((job, slot, reason))

    @hookimpl
    def anarchon_run_finished(
        self, job: str, slot: int, status: RunStatus, error: str | None
    ) -> None:
        self.finished.append((job, slot, status, error))


@pytest.fixture
def recorder() -> Iterator[Recorder]:
    rec = Recorder()
    plugin_manager().register(rec)
    yield rec
    plugin_manager().unregister(rec)


class Store:
    """One store under test, by name: a URL (or a `MemoryStore`) for each scheduler, and a
    reader of what it holds."""

    def __init__(self, kind: str, tmp_path: Path) -> None:
        self.kind = kind
        self.url = f"sqlite:///{tmp_path / 'store.db'}"
        self.name = f"timeout-{id(self)}"
        self.reader: anarchon.LeaseStore | None = None

    def for_scheduler(self) -> str | anarchon.ClaimStore:
        return MemoryStore.create(self.name) if self.kind == "memory" else self.url

    async def open(self) -> anarchon.LeaseStore:
        if self.kind == "memory":
            self.reader = MemoryStore.create(self.name)
        else:
            store = await anarchon.connect(self.url)
            assert isinstance(store, anarchon.LeaseStore)
            self.reader = store
        return self.reader

    async def record(self, job: str, slot: int) -> RunRecord | None:
        assert self.reader is not None
        return next((r for r in await self.reader.history(job, 100) if r.slot == slot), None)


@pytest.fixture(params=["memory", "sqlite"])
async def store(request: pytest.FixtureRequest, tmp_path: Path) -> AsyncIterator[Store]:
    if request.param == "sqlite":
        pytest.importorskip("anarchon_sqlite")
    s = Store(request.param, tmp_path)
    reader = await s.open()
    yield s
    if request.param == "sqlite":
        await reader.close()


def scheduler(store: Store, name: str) -> Scheduler:
    return Scheduler(store.for_scheduler(), instance=name, grace="200ms", environ={})


async def finished(store: Store, job: str, slot: int) -> RunRecord:
    """The run's record once it is finished (waiting for it, with a deadline)."""
    records: list[RunRecord | None] = [None]

    async def poll() -> None:
        deadline = time.monotonic() + 5
        while time.monotonic() < deadline:
            records[0] = await store.record(job, slot)
            if records[0] is not None and records[0].status.finished:
                return
            await asyncio.sleep(0.02)

    await poll()
    record = records[0]
    assert record is not None and record.status.finished, f"run {job}@{slot}: {record}"
    return record


@pytest.mark.parametrize(
    ("timeout", "message"),
    [
        (0, "must be positive"),
        ("-1s", "not a duration"),
        ("soon", "not a duration"),
        (1.5, "whole milliseconds"),
        (True, "got a bool"),
    ],
)
def test_timeout_is_validated(timeout: object, message: str) -> None:
    s = Scheduler(MemoryStore.create(), environ={})
    with pytest.raises(ConfigError, match=f"job 'tick': timeout .*{message}"):
        s.add_job(lambda: None, "* * * * *", name="tick", timeout=timeout)


def test_timeout_defaults_to_none_and_accepts_durations() -> None:
    s = Scheduler(MemoryStore.create(), environ={})
    assert s.add_job(lambda: None, "* * * * *", name="a").timeout_ms is None
    assert s.add_job(lambda: None, "* * * * *", name="b", timeout="10m").timeout_ms == 600_000
    with pytest.raises(ConfigError, match="timeout must be positive"):
        anarchon.once(MemoryStore.create(), "job", timeout=0)


async def test_an_async_run_past_its_timeout_is_cancelled_and_recorded_failed(
    store: Store, recorder: Recorder, caplog: pytest.LogCaptureFixture
) -> None:
    s = scheduler(store, "a")
    runs: list[Run] = []
    cancelled = asyncio.Event()

    @s.job("* * * * * *", name="hang", lease="1s", max_late="500ms", timeout="300ms")
    async def hang(run: Run) -> None:
        runs.append(run)
        try:
            await asyncio.sleep(30)
        except asyncio.CancelledError:
            cancelled.set()
            raise

    with caplog.at_level(logging.INFO, logger="anarchon"):
        async with s:
            await eventually(lambda: bool(runs), 5, "a first run")
            await asyncio.wait_for(cancelled.wait(), 3)
            run = runs[0]
            record = await finished(store, "hang", run.slot)
    assert record.status is RunStatus.FAILED
    assert record.error == "timeout: ran longer than 300ms"
    assert record.attempt == 1
    assert run.fenced
    with pytest.raises(Fenced, match="timed out after 300ms"):
        run.ensure_held()
    assert ("hang", run.slot, "timed out after 300ms") in recorder.fenced
    assert ("hang", run.slot, RunStatus.FAILED, record.error) in recorder.finished
    warnings = [
        r.getMessage()
        for r in caplog.records
        if r.levelno == logging.WARNING and "timed out after 300ms" in r.getMessage()
    ]
    assert warnings and "cancelled; recording it failed" in warnings[0], warnings
    # The lease is over: the run is done for anyone, now and after its lease would have run out.
    reader = store.reader
    assert reader is not None
    other = ClaimRequest(job="hang", slot=run.slot, instance="b", lease_ms=1000)
    assert (await reader.claim(other)).outcome is Outcome.DONE


@pytest.mark.slow
async def test_a_sync_run_past_its_timeout_is_fenced_recorded_failed_and_not_taken_over(
    store: Store, recorder: Recorder
) -> None:
    """The body ignores the timeout and blocks for seconds, longer than the lease: the run is
    recorded failed at the timeout anyway, a backup instance never takes it over, and the
    job's next slots (overlap 'skip') run meanwhile."""
    release = threading.Event()
    runs: list[tuple[str, Run]] = []
    seen: dict[int, str | None] = {}
    instances = [scheduler(store, "a"), scheduler(store, "b")]
    for s in instances:

        @s.job("* * * * * *", name="hang", lease="600ms", max_late="500ms", timeout="300ms")
        def hang(run: Run, me: str = s.instance) -> None:
            runs.append((me, run))
            release.wait(20)
            try:
                run.ensure_held()
            except Fenced as exc:
                seen[run.slot] = str(exc)
            else:
                seen[run.slot] = None

    try:
        for s in instances:
            await s.start()
        await eventually(lambda: bool(runs), 5, "a first run")
        first = runs[0][1]
        record = await finished(store, "hang", first.slot)
        # Recorded while the body still blocks in its thread, which sees the fence.
        assert not release.is_set()
        assert record.status is RunStatus.FAILED
        assert record.error == "timeout: ran longer than 300ms"
        assert first.fenced
        with pytest.raises(Fenced, match=r"hang@\d+ attempt 1 is fenced: timed out after 300ms"):
            first.ensure_held()
        # Two lease lengths later, nobody took it over, and later slots ran meanwhile.
        await eventually(lambda: len({r.slot for _, r in runs}) >= 3, 5, "two later slots")
        await asyncio.sleep(0)
    finally:
        release.set()
        for s in instances:
            await s.stop()
    slots = [r.slot for _, r in runs]
    assert len(slots) == len(set(slots)), f"a slot ran twice: {runs}"
    assert all(r.attempt == 1 for _, r in runs), f"a run was taken over: {runs}"
    for slot in sorted(slots)[:-1]:  # the newest may have ended in time, once released
        record = await finished(store, "hang", slot)
        assert (record.status, record.error, record.attempt) == (
            RunStatus.FAILED,
            "timeout: ran longer than 300ms",
            1,
        )
    await eventually(lambda: len(seen) == len(runs), 5, "every body to end")
    for slot in sorted(slots)[:-1]:
        assert "timed out after 300ms" in (seen[slot] or ""), seen


class CountingRenews(MemoryStore):
    """A memory store that notes when each run's lease was renewed."""

    renewed: ClassVar[list[tuple[int, float]]] = []

    async def renew(self, job: str, slot: int, token: str, lease_ms: int) -> bool:
        CountingRenews.renewed.append((slot, time.monotonic()))
        return await super().renew(job, slot, token, lease_ms)


async def test_the_lease_is_not_renewed_after_the_timeout() -> None:
    CountingRenews.renewed = []
    store = CountingRenews.create()
    s = Scheduler(store, instance="a", environ={})
    release = threading.Event()
    slots: list[int] = []

    @s.job("* * * * * *", lease="300ms", heartbeat="50ms", max_late="500ms", timeout="250ms")
    def hang(run: Run) -> None:
        slots.append(run.slot)
        release.wait(10)

    async with s:
        await eventually(lambda: bool(slots), 5, "a first run")
        await eventually(
            lambda: (r := store.raw_run("hang", slots[0])) is not None and r.status.finished, 3
        )
        timed_out_at = time.monotonic()
        await asyncio.sleep(0.3)  # six heartbeats: none may renew the timed-out run
        release.set()
    renews = [at for slot, at in CountingRenews.renewed if slot == slots[0]]
    assert renews, "the run was never renewed before its timeout: the test proves nothing"
    assert all(at <= timed_out_at for at in renews), "renewed after the timeout"


async def test_a_run_that_ends_in_time_is_not_affected(store: Store, recorder: Recorder) -> None:
    s = scheduler(store, "a")
    slots: list[int] = []

    @s.job("* * * * * *", name="quick", max_late="500ms", timeout="2s")
    async def quick(run: Run) -> None:
        await asyncio.sleep(0.05)
        slots.append(run.slot)

    async with s:
        await eventually(lambda: bool(slots), 5, "a run")
        record = await finished(store, "quick", slots[0])
    assert (record.status, record.error) == (RunStatus.SUCCEEDED, None)
    assert not recorder.fenced


async def test_once_with_a_timeout_fences_the_block_and_records_it_failed() -> None:
    store = MemoryStore.create()
    slot = await store.now_ms()
    async with anarchon.once(store, "report", slot, timeout="100ms") as run:
        assert run is not None
        await eventually(lambda: run.fenced, 3, "the block to be fenced")
        with pytest.raises(Fenced, match="timed out after 100ms"):
            run.ensure_held()
        # Recorded while the block still runs.
        await eventually(
            lambda: (r := store.raw_run("report", slot)) is not None and r.status.finished, 3
        )
        record = store.raw_run("report", slot)
        assert record is not None and record.status is RunStatus.FAILED
        assert record.error == "timeout: ran longer than 100ms"
    record = store.raw_run("report", slot)
    assert record is not None and record.error == "timeout: ran longer than 100ms"


def test_sync_once_with_a_timeout_fences_the_block_and_records_it_failed() -> None:
    store = MemoryStore.create()
    with anarchon.once(store, "report", timeout="100ms") as run:
        assert run is not None
        deadline = time.monotonic() + 3
        while not run.fenced and time.monotonic() < deadline:
            time.sleep(0.01)
        with pytest.raises(Fenced, match="timed out after 100ms"):
            run.ensure_held()
        slot = run.slot
    record = store.raw_run("report", slot)
    assert record is not None and record.status is RunStatus.FAILED
    assert record.error == "timeout: ran longer than 100ms"


@pytest.mark.services
async def test_on_a_store_without_leases_the_timeout_fences_and_is_logged(
    recorder: Recorder, caplog: pytest.LogCaptureFixture
) -> None:
    pytest.importorskip("anarchon_redis")
    url = os.environ.get("ANARCHON_TEST_REDIS_URL", "redis://127.0.0.1:6379/0")
    prefix = f"timeout{os.getpid()}x{time.monotonic_ns() % 10**9}"
    s = Scheduler(f"{url}?strategy=stream-id&prefix={prefix}", instance="a", environ={})
    release = threading.Event()
    runs: list[Run] = []
    seen: list[bool] = []

    @s.job("* * * * * *", name="hang", max_late="500ms", timeout="200ms")
    def hang(run: Run) -> None:
        runs.append(run)
        release.wait(10)
        seen.append(run.fenced)

    with caplog.at_level(logging.WARNING, logger="anarchon"):
        try:
            async with s:
                await eventually(lambda: bool(runs), 5, "a run")
                slot = runs[0].slot
                await eventually(lambda: any(f[1] == slot for f in recorder.finished), 3)
                assert runs[0].fenced
                with pytest.raises(Fenced, match="timed out after 200ms"):
                    runs[0].ensure_held()
        finally:
            release.set()
    assert ("hang", slot, RunStatus.FAILED, "timeout: ran longer than 200ms") in (recorder.finished)
    messages = [r.getMessage() for r in caplog.records]
    assert any("timed out after 200ms" in m and "nothing is recorded" in m for m in messages), (
        messages
    )


# -- two scheduler processes on one SQLite file ---------------------------------------------


def journal(path: Path) -> list[tuple[int, int, int, str]]:
    if not path.exists():
        return []
    db = sqlite3.connect(path, timeout=30)
    try:
        return list(db.execute("SELECT slot, attempt, pid, event FROM runs"))
    except sqlite3.OperationalError:
        return []
    finally:
        db.close()


@pytest.mark.processes
@pytest.mark.slow
@pytest.mark.parametrize("mode", ["sync", "async"])
def test_two_processes_each_slot_runs_once_and_is_recorded_failed_timeout(
    tmp_path: Path, mode: str
) -> None:
    """Each run hangs past its timeout (the sync one past its lease too, ignoring the fence):
    every slot runs once, on one process, attempt 1, and is recorded failed: timeout; the
    other process never takes a run over."""
    pytest.importorskip("anarchon_sqlite")
    store_db, runs_db = tmp_path / "store.db", tmp_path / "runs.db"
    procs: list[subprocess.Popen[str]] = []
    logs = []
    try:
        for i in range(2):
            log = tmp_path / f"worker-{i}.log"
            logs.append(log)
            with log.open("w") as stderr:
                procs.append(
                    subprocess.Popen(
                        [sys.executable, str(WORKER), mode, str(store_db), str(runs_db)],
                        stdout=subprocess.PIPE,
                        stderr=stderr,
                        text=True,
                    )
                )
        for proc in procs:
            assert proc.stdout is not None
            assert proc.stdout.readline().strip() == "ready", "worker did not start"
        deadline = time.monotonic() + 40
        while len({row[0] for row in journal(runs_db) if row[3] == "started"}) < 8:
            if time.monotonic() > deadline:
                text = "\n".join(p.read_text()[-2000:] for p in logs)
                pytest.fail(f"8 slots did not run within 40 s\n{text}")
            time.sleep(0.05)
    finally:
        for proc in procs:
            if proc.poll() is None:
                proc.send_signal(signal.SIGTERM)
        for proc in procs:
            try:
                proc.wait(20)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()
            if proc.stdout is not None:
                proc.stdout.close()
    assert all(p.returncode == 0 for p in procs), [p.read_text()[-2000:] for p in logs]
    rows = journal(runs_db)
    started = sorted(
        (slot, attempt, pid) for slot, attempt, pid, event in rows if event == "started"
    )
    slots = [slot for slot, _, _ in started]
    assert len(slots) == len(set(slots)), f"a slot ran twice: {started}"
    assert all(attempt == 1 for _, attempt, _ in started), f"a run was taken over: {started}"
    assert {event for *_, event in rows} >= {"started", "fenced"}

    async def ledger() -> dict[int, RunRecord]:
        async with anarchon.connect(f"sqlite:///{store_db}") as store:
            return {r.slot: r for r in await store.history("hang", 1000)}

    records = asyncio.run(ledger())
    # Every slot from the first run on, but the last two (perhaps cut short by the stop), has
    # one record: failed, timeout, attempt 1; or skipped as an overlap, when the run before
    # (started late, as a catch-up at start can be) was still within its timeout at the slot.
    window = range(slots[0], slots[-1] - 1000, 1000)
    assert len(window) >= 5
    failed = 0
    for slot in window:
        record = records.get(slot)
        assert record is not None, f"slot {slot} has no record"
        if record.status is RunStatus.SKIPPED:
            assert record.error is not None and record.error.startswith("overlap:"), record
            before = records[slot - 1000]
            assert before.finished_at is not None and before.finished_at >= slot, records
            continue
        assert (record.status, record.error, record.attempt) == (
            RunStatus.FAILED,
            "timeout: ran longer than 400ms",
            1,
        ), record
        failed += 1
    assert failed >= 4
    text = "".join(log.read_text() for log in logs)
    assert "timed out after 400ms" in text
    if mode == "sync":
        assert "which timed out, returned" in text


class FinishFailsOnce(MemoryStore):
    """The first finish is lost on the way (the store never sees it)."""

    failed: ClassVar[list[int]] = []

    async def finish(
        self, job: str, slot: int, token: str, status: RunStatus, error: str | None = None
    ) -> bool:
        if slot not in FinishFailsOnce.failed:
            FinishFailsOnce.failed.append(slot)
            raise StoreUnavailable("finish lost by the test")
        return await super().finish(job, slot, token, status, error)


async def test_a_timed_out_run_whose_finish_fails_is_recorded_on_retry() -> None:
    """The run is fenced by its timeout, but still holds its lease: the finish is retried
    (not given up as for a run fenced because its lease may be gone)."""
    FinishFailsOnce.failed = []
    store = FinishFailsOnce.create()
    s = Scheduler(store, instance="a", environ={})
    slots: list[int] = []

    @s.job("* * * * * *", lease="2s", max_late="500ms", timeout="200ms")
    async def hang(run: Run) -> None:
        slots.append(run.slot)
        await asyncio.sleep(30)

    async with s:
        await eventually(lambda: bool(slots), 5, "a first run")
        await eventually(
            lambda: (r := store.raw_run("hang", slots[0])) is not None and r.status.finished, 3
        )
    record = store.raw_run("hang", slots[0])
    assert record is not None
    assert (record.status, record.error, record.attempt) == (
        RunStatus.FAILED,
        "timeout: ran longer than 200ms",
        1,
    )
    assert slots[0] in FinishFailsOnce.failed
