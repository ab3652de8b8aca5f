"""The runtime against memory:// stores in one process: timing (T2, T5, T6), the lease runner
(F1), the memory rule (T3), outages and shutdown. Multi-process behaviour is in test_processes.py."""

from __future__ import annotations

import asyncio
import logging
import re
import threading
from collections.abc import Sequence

import pytest

import anarchon
from anarchon import (
    Capabilities,
    Claim,
    ClaimRequest,
    ConfigError,
    Fenced,
    MemoryStore,
    Outcome,
    Run,
    RunStatus,
    Scheduler,
    StoreUnavailable,
    hookimpl,
)
from anarchon.plugins import plugin_manager
from anarchon_test_support import eventually

from .clocks import ShiftedClock


def scheduler(store: anarchon.ClaimStore, name: str, **kwargs: object) -> Scheduler:
    return Scheduler(store, instance=name, environ={}, **kwargs)  # type: ignore[arg-type]


@pytest.mark.slow
async def test_three_instances_run_each_slot_once() -> None:
    runs: list[tuple[int, str]] = []
    instances = []
    for i in range(3):
        s = scheduler(MemoryStore.create("three"), f"i{i}")

        @s.job("* * * * * *", name="tick", max_late="500ms")
        async def tick(run: Run, me: str = f"i{i}") -> None:
            runs.append((run.slot, me))

        instances.append(s)
    for s in instances:
        await s.start()
    await eventually(lambda: len({slot for slot, _ in runs}) >= 3, 10, "three slots")
    for s in instances:
        await s.stop()
    slots = [slot for slot, _ in runs]
    assert len(slots) == len(set(slots)), f"a slot ran twice: {sorted(slots)}"
    assert all(slot % 1000 == 0 for slot in slots)


@pytest.mark.slow
async def test_T2_fires_by_the_store_clock_never_before_the_slot() -> None:
    """The store's clock is 3 s ahead of ours: slots fire 3 s earlier by our clock."""
    store_clock = ShiftedClock(offset_ms=3000)
    store = MemoryStore.create(clock=store_clock.wall_ms)
    s = scheduler(store, "a")
    fired: list[tuple[int, int, int]] = []

    @s.job("* * * * * *", max_late="200ms")
    def tick(run: Run) -> None:
        fired.append((run.slot, store_clock.wall_ms(), ShiftedClock().wall_ms()))

    async with s:
        assert abs(s.store_clock.offset_ms - 3000) < 50
        await eventually(lambda: len(fired) >= 2, 5)
    for slot, store_now, local_now in fired:
        assert store_now >= slot, "fired before the slot by the store's clock"
        assert store_now - slot < 200
        assert local_now < slot - 2500


@pytest.mark.slow
async def test_T5_forward_jump_fires_skipped_slots_that_are_not_late() -> None:
    clock = ShiftedClock()
    store = MemoryStore.create(clock=clock.wall_ms)
    s = scheduler(store, "a", clock=clock)
    slots: list[int] = []

    # catch_up="all" with the default overlap (skip): the jumped-over slots run one after
    # another and never skip each other.
    @s.job("* * * * * *", max_late="5s", catch_up="all")
    def tick(run: Run) -> None:
        slots.append(run.slot)

    started = clock.wall_ms()
    async with s:
        # The start's own catch-up first (slots within max_late run one after another).
        await eventually(lambda: bool(slots) and max(slots) >= started - started % 1000, 5)
        before = clock.wall_ms()
        clock.offset_ms += 3_000
        await eventually(lambda: max(slots) >= before + 3_000 - 1000, 5)
    ordered = sorted(slots)
    records = {r.slot: (str(r.status), r.error) for r in await store.history("tick", 100)}
    assert ordered == list(range(ordered[0], ordered[-1] + 1, 1000)), (
        f"a skipped slot was lost: {sorted(records.items())}"
    )
    assert len(slots) == len(set(slots))


@pytest.mark.slow
async def test_T5_backward_jump_never_fires_a_slot_twice() -> None:
    clock = ShiftedClock()
    # The store keeps real time so that only this instance's clock jumps: without the store's
    # memory, only the scheduler's own ordering prevents a second firing.
    store = MemoryStore.create()
    s = scheduler(store, "a", clock=clock)
    slots: list[int] = []

    @s.job("* * * * * *", max_late="5s")
    def tick(run: Run) -> None:
        slots.append(run.slot)

    async with s:
        await eventually(lambda: len(slots) >= 2, 5)
        s.store_clock.offset_ms = 0
        clock.offset_ms -= 2_000
        seen = len(slots)
        await eventually(lambda: len(slots) >= seen + 1, 6)
    assert len(slots) == len(set(slots)), f"fired twice: {slots}"
    assert slots == sorted(slots)


async def test_T6_catch_up_claims_recent_slots_on_start() -> None:
    store = MemoryStore.create()
    s = scheduler(store, "a")
    slots: list[int] = []

    @s.job("* * * * * *", max_late="3s", catch_up="all")
    def tick(run: Run) -> None:
        slots.append(run.slot)

    now = await store.now_ms()
    async with s:
        await eventually(lambda: len(slots) >= 3, 3)
    assert min(slots) >= now - 3000
    assert min(slots) <= now - 2000, f"catch-up missed recent slots: {sorted(slots)}"
    records = {r.slot: r for r in await store.history("tick", 100)}
    assert all(records[slot].status is RunStatus.SUCCEEDED for slot in slots), records


class ForgetfulMemory(MemoryStore):
    @property
    def capabilities(self) -> Capabilities:
        return Capabilities(
            leases=False,
            self_recognition=True,
            fencing=False,
            overlap=False,
            history=True,
            store_clock=True,
            remembers_ms=10_000,
        )


def test_T3_refuses_a_job_the_store_could_forget() -> None:
    s = scheduler(ForgetfulMemory.create(), "a", clock_skew="1s")

    @s.job("0 * * * *", max_late="30s", overlap="allow")
    def hourly() -> None: ...

    with pytest.raises(ConfigError) as info:
        asyncio.run(s.start())
    message = str(info.value)
    assert "job 'hourly': max_late (30000 ms) plus clock_skew (1000 ms)" in message
    assert "remembers a run (10000 ms)" in message
    assert "Set max_late to at most 9000 ms" in message


def test_overlap_skip_needs_leases() -> None:
    s = scheduler(ForgetfulMemory.create(), "a")

    @s.job("0 * * * *", max_late="1s", overlap="skip")
    def hourly() -> None: ...

    with pytest.raises(ConfigError, match="overlap='skip' needs a store with leases"):
        asyncio.run(s.start())


@pytest.mark.parametrize(
    ("settings", "message"),
    [
        ({"lease": "1s", "heartbeat": "2s"}, "heartbeat (2000 ms) must be shorter than the lease"),
        ({"attempts": 0}, "attempts must be from 1 to 999, got 0"),
        ({"overlap": "sometimes"}, "overlap must be 'skip' or 'allow'"),
        ({"lease": "-1s"}, "job 'f': lease '-1s' is not a duration"),
        ({"tz": "Mars/Olympus"}, "Mars/Olympus"),
        ({"name": "bad name"}, "job name 'bad name' contains ' '"),
    ],
)
def test_job_settings_are_validated(settings: dict[str, object], message: str) -> None:
    s = scheduler(MemoryStore.create(), "a")
    with pytest.raises(ConfigError, match=re.escape(message)):
        s.add_job(lambda: None, "* * * * *", **{"name": "f", **settings})


def test_a_job_defined_twice_is_an_error() -> None:
    s = scheduler(MemoryStore.create(), "a")
    s.add_job(lambda: None, "* * * * *", name="f")
    with pytest.raises(ConfigError, match="job 'f' is defined twice"):
        s.add_job(lambda: None, "* * * * *", name="f")


def test_bad_cron_is_an_error() -> None:
    s = scheduler(MemoryStore.create(), "a")
    with pytest.raises(ConfigError):
        s.add_job(lambda: None, "61 * * * *", name="f")


class Recorder:
    def __init__(self) -> None:
        self.fenced: list[tuple[str, int, str]] = []
        self.finished: list[tuple[str, RunStatus, bool]] = []
        self.errors: list[str] = []

    @hookimpl
    def anarchon_run_fenced(self, job: str, attempt: int, reason: str) -> None:
        self.fenced.append((job, attempt, reason))

    @hookimpl
    def anarchon_run_finished(self, job: str, status: RunStatus, recorded: bool) -> None:
        self.finished.append((job, status, recorded))

    @hookimpl
    def anarchon_store_error(self, operation: str) -> None:
        self.errors.append(operation)


@pytest.fixture
def recorder() -> object:
    rec = Recorder()
    plugin_manager().register(rec)
    yield rec
    plugin_manager().unregister(rec)


async def test_F1_async_job_is_cancelled_when_a_takeover_refuses_its_renew(
    recorder: Recorder,
) -> None:
    store = MemoryStore.create()
    s = scheduler(store, "a")
    started, cancelled = asyncio.Event(), asyncio.Event()
    holder: list[Run] = []

    @s.job("* * * * * *", lease="600ms", max_late="200ms", overlap="allow")
    async def slow(run: Run) -> None:
        holder.append(run)
        started.set()
        try:
            await asyncio.sleep(30)
        except asyncio.CancelledError:
            cancelled.set()
            raise

    async with s:
        await asyncio.wait_for(started.wait(), 5)
        run = holder[0]
        store.force_expire("slow", run.slot)
        other = ClaimRequest(job="slow", slot=run.slot, instance="b", lease_ms=10_000)
        assert (await store.claim(other)).attempt == 2
        await asyncio.wait_for(cancelled.wait(), 2)
        assert run.fenced
        with pytest.raises(Fenced, match="took the run over"):
            run.ensure_held()
    assert ("slow", 1, "the store refused the renew: another instance took the run over") in (
        recorder.fenced
    )
    record = store.raw_run("slow", holder[0].slot)
    assert record is not None and record.token == other.token and record.attempt == 2


class RenewFails(MemoryStore):
    async def renew(self, job: str, slot: int, token: str, lease_ms: int) -> bool:
        raise StoreUnavailable("renew refused by the test")


@pytest.mark.slow
async def test_F1_sync_job_sees_fenced_when_renews_fail_until_the_deadline(
    recorder: Recorder,
) -> None:
    store = RenewFails.create()
    s = scheduler(store, "a")
    seen: list[bool] = []
    release = threading.Event()

    @s.job("* * * * * *", lease="300ms", max_late="200ms", overlap="allow")
    def slow(run: Run) -> None:
        release.wait(10)
        seen.append(run.fenced)
        try:
            run.ensure_held()
        except Fenced:
            seen.append(True)

    async with s:
        await eventually(lambda: bool(recorder.fenced), 5, "the run to fence itself")
        release.set()
        await eventually(lambda: len(seen) >= 2, 5)
    assert seen[:2] == [True, True]
    assert recorder.fenced[0][2] == "no renew succeeded before the local lease deadline"
    assert "renew" in recorder.errors


class Flaky(MemoryStore):
    """Fails the first `failures` claims after the reply would have been sent: the store took
    the claim, the client never heard."""

    failures = 3

    async def claim(self, request: ClaimRequest) -> Claim:
        answer = await super().claim(request)
        if Flaky.failures > 0:
            Flaky.failures -= 1
            raise StoreUnavailable("connection reset by the test")
        return answer

    async def claim_many(self, requests: Sequence[ClaimRequest]) -> list[Claim]:
        return [await self.claim(r) for r in requests]


async def test_C2_lost_replies_are_resent_with_the_same_token_and_logged_once(
    caplog: pytest.LogCaptureFixture, recorder: Recorder
) -> None:
    store = Flaky.create()
    # No fleet heartbeat: Flaky fails claims only, so an announce between two failed claims
    # would end the outage (rightly) and this test is about the claims' resends.
    s = scheduler(store, "a", contenders=0)
    runs: list[int] = []

    @s.job("* * * * * *", max_late="3s")
    def tick(run: Run) -> None:
        runs.append(run.slot)

    with caplog.at_level(logging.WARNING, logger="anarchon"):
        async with s:
            await eventually(lambda: len(runs) >= 2, 6)
    assert len(runs) == len(set(runs))
    unreachable = [r for r in caplog.records if "is unreachable" in r.getMessage()]
    assert len(unreachable) == 1, [r.getMessage() for r in caplog.records]
    assert recorder.errors.count("claim") == 1


async def test_shutdown_releases_leases_after_the_grace_period() -> None:
    store = MemoryStore.create()
    s = scheduler(store, "a", grace="100ms")
    started = asyncio.Event()
    slot: list[int] = []

    @s.job("* * * * * *", lease="30s", max_late="200ms", overlap="allow")
    async def forever(run: Run) -> None:
        slot.append(run.slot)
        started.set()
        await asyncio.sleep(60)

    await s.start()
    await asyncio.wait_for(started.wait(), 5)
    await s.stop()
    record = store.raw_run("forever", slot[0])
    assert record is not None and record.status is RunStatus.RUNNING
    assert record.lease_until is not None and record.lease_until < await store.now_ms()
    backup = ClaimRequest(job="forever", slot=slot[0], instance="b")
    assert (await store.claim(backup)).attempt == 2


async def test_a_failing_job_is_recorded_as_failed_with_its_error() -> None:
    store = MemoryStore.create()
    s = scheduler(store, "a")
    slots: list[int] = []

    @s.job("* * * * * *", max_late="200ms")
    def broken(run: Run) -> None:
        slots.append(run.slot)
        raise ValueError("disk full")

    async with s:
        await eventually(
            lambda: (
                bool(slots)
                and store.raw_run("broken", slots[0]) is not None
                and store.raw_run("broken", slots[0]).status.finished
            ),
            5,
        )  # type: ignore[union-attr]
    record = store.raw_run("broken", slots[0])
    assert record is not None
    assert record.status is RunStatus.FAILED
    assert record.error == "ValueError: disk full"


class Unreachable(MemoryStore):
    """Claims work; every later call fails, as for an instance cut off after it won."""

    async def renew(self, job: str, slot: int, token: str, lease_ms: int) -> bool:
        raise StoreUnavailable("cut off")

    async def finish(
        self, job: str, slot: int, token: str, status: RunStatus, error: str | None = None
    ) -> bool:
        raise StoreUnavailable("cut off")


@pytest.mark.slow
async def test_backup_takes_over_when_the_winner_stops_renewing() -> None:
    shared = "backup"
    winner_store = Unreachable.create(shared)
    a = scheduler(winner_store, "a")
    b = scheduler(MemoryStore.create(shared), "b")
    runs: list[tuple[int, int, str]] = []

    for s, me in ((a, "a"), (b, "b")):

        @s.job("* * * * * *", name="job", lease="400ms", max_late="300ms", overlap="allow")
        async def job(run: Run, me: str = me) -> None:
            runs.append((run.slot, run.attempt, me))
            await asyncio.sleep(2)

    async with a:
        await eventually(lambda: bool(runs), 5)
        async with b:
            first = runs[0][0]
            await eventually(lambda: any(r[0] == first and r[1] == 2 for r in runs), 5)
    assert [r for r in runs if r[0] == first][:2] == [(first, 1, "a"), (first, 2, "b")]


async def test_once_runs_the_body_on_one_caller_and_records_the_result() -> None:
    store = MemoryStore.create()
    slot = 60_000 * ((await store.now_ms()) // 60_000)
    ran: list[str] = []
    async with anarchon.once(store, "report", slot, instance="a") as run:
        assert run is not None and run.attempt == 1
        ran.append("a")
    async with anarchon.once(store, "report", slot, instance="b") as run:
        assert run is None
    record = store.raw_run("report", slot)
    assert record is not None and record.status is RunStatus.SUCCEEDED
    assert ran == ["a"]


async def test_once_records_a_failure_and_reraises() -> None:
    store = MemoryStore.create()
    slot = await store.now_ms()
    with pytest.raises(KeyError):
        async with anarchon.once(store, "report", slot) as run:
            assert run is not None
            raise KeyError("boom")
    record = store.raw_run("report", slot)
    assert record is not None and record.status is RunStatus.FAILED
    assert record.error is not None and "KeyError" in record.error


async def test_once_as_a_decorator_returns_none_elsewhere() -> None:
    store = MemoryStore.create()

    @anarchon.once(store, "nightly", every="1h")
    async def nightly(x: int) -> int:
        return x * 2

    assert await nightly(21) == 42
    assert await nightly(21) is None


async def test_once_late_slot_is_not_run() -> None:
    store = MemoryStore.create()
    async with anarchon.once(store, "old", 1000, max_late="1s") as run:
        assert run is None
    record = store.raw_run("old", 1000)
    assert record is not None and record.status is RunStatus.SKIPPED, record
    assert record.error is not None and record.error.startswith("late: "), record
    assert Outcome.LATE.value == "late"


async def test_T5_a_day_long_forward_jump_skips_late_slots_at_once(
    caplog: pytest.LogCaptureFixture,
) -> None:
    clock = ShiftedClock()
    store = MemoryStore.create(clock=clock.wall_ms)
    s = scheduler(store, "a", clock=clock, clock_skew="100ms")
    slots: list[int] = []

    @s.job("* * * * * *", max_late="2s", overlap="allow")
    def tick(run: Run) -> None:
        slots.append(run.slot)

    with caplog.at_level(logging.INFO, logger="anarchon.scheduler"):
        async with s:
            await eventually(lambda: len(slots) >= 1, 5)
            clock.offset_ms += 86_400_000
            jumped = clock.wall_ms()
            await eventually(lambda: max(slots) >= jumped, 5, "a slot after the jump")
    after = [slot for slot in slots if slot > jumped - 86_400_000]
    assert all(slot >= jumped - 2_100 - 1000 for slot in after), "a late slot was claimed"
    skipped = [r for r in caplog.records if "skipped" in r.getMessage()]
    assert len(skipped) == 1, [r.getMessage() for r in skipped]
