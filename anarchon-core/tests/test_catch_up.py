"""The ledger in the runtime: catch-up policies (T6), recorded skips, late slots after a stall,
a degraded start while the store is down, and misuse of `run()`."""

from __future__ import annotations

import asyncio
import itertools
import logging
import threading
from collections.abc import Iterator, Sequence

import pytest

import anarchon
from anarchon import (
    ClaimRequest,
    ConfigError,
    MemoryStore,
    Outcome,
    Run,
    RunRecord,
    RunStatus,
    Scheduler,
    StoreUnavailable,
    hookimpl,
)
from anarchon._runtime.catch_up import LATE_RECORDS_MAX
from anarchon._runtime.jobs import make_job
from anarchon._runtime.timetable import Timetable
from anarchon.plugins import plugin_manager
from anarchon_test_support import eventually

from .clocks import ShiftedClock


def scheduler(store: anarchon.ClaimStore, name: str, **kwargs: object) -> Scheduler:
    return Scheduler(store, instance=name, environ={}, **kwargs)  # type: ignore[arg-type]


async def ledger(store: MemoryStore, job: str) -> dict[int, RunRecord]:
    return {r.slot: r for r in await store.history(job, 1000)}


async def test_T6_latest_is_the_default_and_records_older_slots_coalesced() -> None:
    store = MemoryStore.create()
    s = scheduler(store, "a")
    ran: list[int] = []

    @s.job("* * * * * *", max_late="3s")
    def tick(run: Run) -> None:
        ran.append(run.slot)

    now = await store.now_ms()
    async with s:
        await eventually(lambda: len(ran) >= 1, 3)
        records = await ledger(store, "tick")
    first = min(ran)
    older = sorted(slot for slot in records if slot < first)
    assert older and min(older) >= now - 3000, f"no backlog was recorded: {records}"
    for slot in older:
        record = records[slot]
        assert record.status is RunStatus.SKIPPED and record.attempt == 0, record
        assert record.error is not None and record.error.startswith("coalesced: slot "), record
    assert first not in older and records[first].status is not RunStatus.SKIPPED


async def test_T6_all_runs_every_missed_slot_one_after_another_across_instances() -> None:
    shared = "catch-up-all"
    spans: list[tuple[int, float, float]] = []
    schedulers = []
    for name in ("a", "b", "c"):
        s = scheduler(MemoryStore.create(shared), name)

        # overlap stays 'skip' (the default): catch-up runs must not make each other overlap.
        @s.job("* * * * * *", name="tick", max_late="3s", lease="2s", catch_up="all")
        async def tick(run: Run) -> None:
            began = asyncio.get_running_loop().time()
            await asyncio.sleep(0.05)
            spans.append((run.slot, began, asyncio.get_running_loop().time()))

        schedulers.append(s)
    store = MemoryStore.create(shared)
    now = await store.now_ms()
    await asyncio.gather(*(s.start() for s in schedulers))
    try:
        await eventually(lambda: len(spans) >= 4, 6)
    finally:
        await asyncio.gather(*(s.stop() for s in schedulers))
    records = await ledger(store, "tick")
    window = [slot for slot in records if slot <= max(slot for slot, _, _ in spans)]
    assert min(window) <= now - 2000, f"the backlog was not caught up: {sorted(records)}"
    skipped = {slot: r.error for slot, r in records.items() if r.status is RunStatus.SKIPPED}
    assert not skipped, f"catch_up='all' skipped slots: {skipped}"
    slots = [slot for slot, _, _ in spans]
    assert len(slots) == len(set(slots)), f"a slot ran twice: {sorted(slots)}"
    by_slot = sorted(spans)
    for (_, _, end), (slot, begin, _) in itertools.pairwise(by_slot):
        if slot <= now:  # the backlog: strictly one after another
            assert begin >= end, f"catch-up runs overlapped at slot {slot}: {by_slot}"


@pytest.mark.slow
async def test_T6_none_looks_back_at_nothing() -> None:
    store = MemoryStore.create()
    s = scheduler(store, "a")
    ran: list[int] = []

    @s.job("* * * * * *", max_late="3s", catch_up="none")
    def tick(run: Run) -> None:
        ran.append(run.slot)

    now = await store.now_ms()
    async with s:
        await eventually(lambda: len(ran) >= 1, 3)
    records = await ledger(store, "tick")
    assert min(records) > now, f"catch_up='none' decided slots before its start: {records}"


@pytest.mark.slow
async def test_T5_slots_later_than_max_late_after_a_jump_are_recorded_skipped_late() -> None:
    clock = ShiftedClock()
    store = MemoryStore.create(clock=clock.wall_ms)
    s = scheduler(store, "a", clock=clock)
    ran: list[int] = []

    @s.job("* * * * * *", max_late="1s")
    def tick(run: Run) -> None:
        ran.append(run.slot)

    async with s:
        await eventually(lambda: len(ran) >= 1, 3)
        before = max(ran)
        clock.offset_ms += 10_000
        await eventually(lambda: max(ran) >= before + 10_000, 5)
    records = await ledger(store, "tick")
    gap = range(before + 1000, before + 9000, 1000)
    missing = [slot for slot in gap if slot not in records]
    assert not missing, f"slots jumped over vanished from the ledger: {missing}"
    late = [records[slot] for slot in gap if records[slot].status is RunStatus.SKIPPED]
    assert late and all((r.error or "").startswith("late: ") for r in late), records


def test_T5_late_slots_recorded_are_bounded() -> None:
    spec = make_job(
        lambda: None,
        cron="* * * * * *",
        name="tick",
        tz="UTC",
        lease=None,
        max_late="1s",
        overlap=None,
        attempts=3,
        heartbeat=None,
    )
    table = Timetable({"tick": spec}, 0, clock_skew_ms=0)
    due = table.slot_due(3_600_000)  # an hour's stall of a secondly job
    assert due is not None
    late = due.late["tick"]
    assert len(late) == LATE_RECORDS_MAX and late == sorted(late)
    assert late[-1] < 3_600_000 - 1000 <= late[-1] + 1000, "the newest late slots are kept"


class Outage(MemoryStore):
    """Every claim fails while `down` is set, as a store cut off for a while."""

    down = False

    async def claim(self, request: ClaimRequest) -> anarchon.Claim:
        if Outage.down:
            raise StoreUnavailable("connection refused by the test")
        return await super().claim(request)

    async def claim_many(self, requests: Sequence[ClaimRequest]) -> list[anarchon.Claim]:
        return [await self.claim(r) for r in requests]


@pytest.mark.slow
async def test_slots_of_an_outage_are_recorded_late_once_the_store_answers() -> None:
    store = Outage.create()
    s = scheduler(store, "a")
    ran: list[int] = []

    @s.job("* * * * * *", max_late="500ms")
    def tick(run: Run) -> None:
        ran.append(run.slot)

    async with s:
        await eventually(lambda: len(ran) >= 1, 3)
        Outage.down = True
        down_from = max(ran) + 1000
        try:
            await eventually(lambda: s.health().store_reachable is False, 3)
            await eventually(
                lambda: s.last_claims["tick"][0] >= down_from + 2000, 5, "slots while down"
            )
        finally:
            Outage.down = False
        up_at = await store.now_ms()
        await eventually(lambda: max(ran) > up_at, 3, "a run after the outage")
        outage = range(down_from, up_at - 1000, 1000)
        await eventually(
            lambda: all(store.raw_run("tick", slot) is not None for slot in outage),
            5,
            "every slot of the outage recorded",
        )
    records = await ledger(store, "tick")
    assert records[down_from].status is RunStatus.SKIPPED
    assert (records[down_from].error or "").startswith("late: "), records[down_from]


@pytest.mark.slow
async def test_T6_after_a_short_outage_the_job_catches_up_by_its_policy() -> None:
    """Slots that fell due while the store did not answer (but are not late) are decided in
    order once it answers: with 'latest' the older ones are coalesced, none is an overlap."""
    store = Outage.create()
    s = scheduler(store, "a")
    ran: list[int] = []

    @s.job("* * * * * *", max_late="6s", lease="5s")
    async def tick(run: Run) -> None:
        ran.append(run.slot)
        await asyncio.sleep(0.3)

    async with s:
        await eventually(lambda: len(ran) >= 1, 3)
        Outage.down = True
        down_from = max(ran) + 1000
        # Four slots fall due while the store refuses every claim.
        await eventually(lambda: store.clock() >= down_from + 4000, 6, "four slots down")
        Outage.down = False
        up_at = await store.now_ms()
        slots = range(down_from, up_at - 1000, 1000)
        await eventually(
            lambda: all(store.raw_run("tick", slot) is not None for slot in slots),
            5,
            "every slot of the outage decided",
        )
    records = await ledger(store, "tick")
    outage = [records[slot] for slot in slots]
    kinds = [(r.slot, r.status, (r.error or "").split(":")[0]) for r in outage]
    assert len(outage) >= 3, kinds
    assert not [k for k in kinds if k[2] == "overlap"], f"decided all at once: {kinds}"
    assert [k for k in kinds if k[2] == "coalesced"], kinds


class Recorder:
    def __init__(self) -> None:
        self.claims: list[tuple[str, str]] = []

    @hookimpl
    def anarchon_claim_decided(self, request: ClaimRequest, claim: anarchon.Claim) -> None:
        self.claims.append((str(claim.outcome), claim.reason))


@pytest.fixture
def recorder() -> Iterator[Recorder]:
    rec = Recorder()
    manager = plugin_manager()
    manager.register(rec)
    yield rec
    manager.unregister(rec)


@pytest.mark.slow
async def test_S1_overlap_is_recorded_logged_and_reported(
    caplog: pytest.LogCaptureFixture, recorder: Recorder
) -> None:
    store = MemoryStore.create()
    s = scheduler(store, "a")
    ran: list[int] = []

    @s.job("* * * * * *", max_late="500ms", lease="5s", catch_up="none")
    async def long(run: Run) -> None:
        ran.append(run.slot)
        await asyncio.sleep(2.5)

    with caplog.at_level(logging.INFO, logger="anarchon.store"):
        async with s:
            await eventually(lambda: len(ran) >= 1, 3)
            held = ran[0]
            await eventually(
                lambda: store.raw_run("long", held + 1000) is not None, 3, "the next slot"
            )
    record = store.raw_run("long", held + 1000)
    assert record is not None and record.status is RunStatus.SKIPPED, record
    assert record.error == (
        f"overlap: slot {held} of this job holds a live lease and overlap is 'skip'"
    )
    logged = [r for r in caplog.records if getattr(r, "outcome", None) == "skipped"]
    assert logged and logged[0].levelno == logging.INFO
    assert getattr(logged[0], "skip", None) == "overlap"
    assert ("skipped", record.error) in recorder.claims


async def http_status(port: int, path: str) -> int:
    reader, writer = await asyncio.open_connection("127.0.0.1", port)
    writer.write(f"GET {path} HTTP/1.0\r\nHost: x\r\n\r\n".encode())
    await writer.drain()
    status = int((await reader.readline()).split()[1])
    writer.close()
    await writer.wait_closed()
    return status


class DownAtFirst(MemoryStore):
    """Refuses to open `failures` times, as a store that is not up yet."""

    failures = 0

    async def open(self) -> None:
        if DownAtFirst.failures > 0:
            DownAtFirst.failures -= 1
            raise StoreUnavailable("connection refused by the test")


@pytest.mark.slow
async def test_degraded_start_is_not_ready_then_catches_up() -> None:
    DownAtFirst.failures = 3
    store = DownAtFirst.create()
    s = scheduler(store, "a", catch_up="all", health_port=0)
    ran: list[int] = []

    @s.job("* * * * * *", max_late="5s")
    def tick(run: Run) -> None:
        ran.append(run.slot)

    started = await store.now_ms()
    await s.start()
    try:
        health = s.health()
        assert health.started and not health.ready and not health.store_open
        assert s._health_server is not None, "the probes must answer while degraded"
        port = s._health_server.port
        assert await http_status(port, "/healthz") == 200
        assert await http_status(port, "/readyz") == 503
        await eventually(lambda: s.health().ready, 10, "the store opened")
        assert await http_status(port, "/readyz") == 200
        await eventually(lambda: len(ran) >= 3, 5)
    finally:
        await s.stop()
    assert min(ran) < started + 1000, f"the slots of the wait were not caught up: {ran}"


async def test_fail_fast_keeps_the_old_start() -> None:
    DownAtFirst.failures = 1000
    s = scheduler(DownAtFirst.create(), "a", fail_fast=True, start_timeout="300ms")

    @s.job("* * * * * *")
    def tick() -> None: ...

    with pytest.raises(StoreUnavailable, match="did not answer within 300 ms"):
        await s.start()
    DownAtFirst.failures = 0


class Refused(MemoryStore):
    async def open(self) -> None:
        raise ConfigError("the store refused the credentials of user 'app'")


async def test_errors_retrying_cannot_fix_fail_the_start_at_once() -> None:
    s = scheduler(Refused.create(), "a")

    @s.job("* * * * * *")
    def tick() -> None: ...

    with pytest.raises(ConfigError, match="refused the credentials"):
        await asyncio.wait_for(s.start(), 2)
    assert not s.health().started


async def test_run_inside_a_running_loop_says_what_to_use() -> None:
    s = scheduler(MemoryStore.create(), "a")
    with pytest.raises(RuntimeError, match=r"await scheduler.serve\(\)"):
        s.run()


def test_run_works_off_the_main_thread() -> None:
    store = MemoryStore.create("off-main")
    s = scheduler(store, "a")
    ran = threading.Event()

    @s.job("* * * * * *", max_late="2s")
    def tick() -> None:
        ran.set()

    errors: list[BaseException] = []

    def target() -> None:
        try:
            s.run()
        except BaseException as exc:  # noqa: BLE001 - reported by the assertion below
            errors.append(exc)

    thread = threading.Thread(target=target)
    thread.start()
    assert ran.wait(5), f"the job never ran: {errors}"
    running = s.dispatcher.task  # request_stop is called on the scheduler's own loop
    assert running is not None
    running.get_loop().call_soon_threadsafe(s.request_stop)
    thread.join(5)
    assert not thread.is_alive() and not errors, errors


def test_catch_up_is_validated_everywhere(monkeypatch: pytest.MonkeyPatch) -> None:
    with pytest.raises(ConfigError, match="catch_up must be one of 'latest'"):
        scheduler(MemoryStore.create(), "a", catch_up="sometimes")
    s = Scheduler(MemoryStore.create(), environ={"ANARCHON_CATCH_UP": "all"})
    assert str(s.settings.catch_up) == "all"
    with pytest.raises(ConfigError, match="ANARCHON_FAIL_FAST"):
        Scheduler(MemoryStore.create(), environ={"ANARCHON_FAIL_FAST": "maybe"})
    with pytest.raises(ConfigError, match="job 'x': catch_up must be"):
        s.job("* * * * *", name="x", catch_up="every")(lambda: None)


async def test_a_resent_finish_is_not_taken_for_fencing() -> None:
    store = MemoryStore.create()
    request = ClaimRequest(job="j", slot=await store.now_ms(), instance="a")
    claim = await store.claim(request)
    assert claim.outcome is Outcome.WON
    assert await store.finish("j", request.slot, request.token, RunStatus.SUCCEEDED)
    assert await store.finish("j", request.slot, request.token, RunStatus.SUCCEEDED), "C2"
    assert not await store.finish("j", request.slot, request.token, RunStatus.FAILED)


@pytest.mark.slow
async def test_F1_a_forward_step_of_the_store_clock_fences_the_runner_before_its_renew() -> None:
    clock = ShiftedClock()
    shared = "clock-step"
    a = scheduler(MemoryStore.create(shared, clock=clock.wall_ms), "a")
    b = scheduler(MemoryStore.create(shared, clock=clock.wall_ms), "b")
    store = MemoryStore.create(shared, clock=clock.wall_ms)
    steps: list[tuple[str, int, bool]] = []
    fenced_at: dict[str, float] = {}

    for s, me in ((a, "a"), (b, "b")):

        @s.job("* * * * * *", name="long", lease="9s", heartbeat="3s", max_late="3s")
        def long(run: Run, me: str = me) -> None:
            import time

            for _ in range(500):
                time.sleep(0.02)
                if run.fenced:
                    fenced_at.setdefault(me, time.monotonic())
                    return
                steps.append((me, run.attempt, run.fenced))

    await a.start()
    try:
        await eventually(lambda: bool(steps), 3, "a first run")
        holder, _, _ = steps[0]
        slot = next(iter(e.run.slot for e in (a if holder == "a" else b).executions))
        await b.start() if holder == "a" else await a.start()
        first = store.raw_run("long", slot)
        assert first is not None
        # Step right after a renew: without the watch, the runner works on until the next one.
        await eventually(
            lambda: (store.raw_run("long", slot) or first).lease_until != first.lease_until, 5
        )
        loop = asyncio.get_running_loop()
        stepped_at = loop.time()
        clock.offset_ms += 20_000
        await eventually(lambda: holder in fenced_at, 5, "the old runner fenced")
        # A backup checks every heartbeat (3 s); on a loaded machine the new run's first step
        # may come a few seconds later still. Promptness is asserted for the fencing only.
        await eventually(lambda: any(attempt == 2 for _, attempt, _ in steps), 15, "takeover")
    finally:
        await asyncio.gather(a.stop(), b.stop())
    assert fenced_at[holder] - stepped_at < 2.0, "fenced only by the next renew, 3 s later"
    assert not [s for s in steps if s[2]], "a step ran fenced"
