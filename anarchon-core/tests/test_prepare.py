"""Preparing slots ahead (`SupportsPrepare`): the timetable says when, the scheduler calls the
store before each slot, and a preparation that fails never costs a run."""

from __future__ import annotations

import logging
from collections.abc import Sequence

import pytest

from anarchon import MemoryStore, Run, Scheduler, StoreUnavailable, SupportsPrepare
from anarchon._runtime.jobs import make_job
from anarchon._runtime.timetable import MIN_PREPARE_LEAD_MS, Timetable
from anarchon_test_support import eventually

SECOND = 1000


def spec(name: str, cron: str, max_late: int = 500) -> object:
    return make_job(
        lambda: None,
        cron=cron,
        name=name,
        tz="UTC",
        lease=None,
        max_late=max_late,
        overlap=None,
        attempts=3,
        heartbeat=None,
    )


def timetable(now: int, ahead: int, **crons: str) -> Timetable:
    jobs = {name: spec(name, cron) for name, cron in crons.items()}
    return Timetable(jobs, now, clock_skew_ms=0, prepare_ahead_ms=ahead)  # type: ignore[arg-type]


def test_a_slot_is_prepared_ahead_with_all_its_jobs_then_fired() -> None:
    t0 = 1_764_000_000_000  # a whole minute
    table = timetable(t0 + 10 * SECOND, 5 * SECOND, a="* * * * *", b="* * * * *", c="*/2 * * * *")
    slot = t0 + 60 * SECOND
    assert table.wake_at() == slot - 5 * SECOND
    assert table.prepares_due(slot - 5 * SECOND - 1) == []
    assert table.prepares_due(slot - 5 * SECOND) == [(slot, ["a", "b"])]
    assert table.prepares_due(slot - 5 * SECOND) == [], "each slot is prepared once"
    assert table.slot_due(slot - 1) is None, "never fired before its time"
    due = table.slot_due(slot)
    assert due is not None and due.slot == slot and [s.name for s in due.fresh] == ["a", "b"]
    # The next slot of a and b, and c's, each come due ahead of their own slot.
    assert table.prepares_due(slot + 60 * SECOND - 5 * SECOND) == [
        (slot + 60 * SECOND, ["a", "b", "c"])
    ]


def test_a_slot_too_close_when_its_preparation_comes_is_not_prepared() -> None:
    t0 = 1_764_000_000_000
    table = timetable(t0 + 10 * SECOND, 5 * SECOND, a="* * * * *")
    slot = t0 + 60 * SECOND
    assert table.prepares_due(slot - MIN_PREPARE_LEAD_MS + 1) == []
    due = table.slot_due(slot)
    assert due is not None and due.slot == slot


def test_catch_up_slots_are_claimed_at_once_and_never_prepared() -> None:
    """T6: a slot within max_late before the start is due at once; preparing it is pointless."""
    t0 = 1_764_000_000_000
    table = timetable(t0 + 200, 5 * SECOND, a="* * * * * *")
    assert table.prepares_due(t0 + 200) == []
    due = table.slot_due(t0 + 200)
    assert due is not None and due.slot == t0
    # Once the catch-up slot fired, the next one (800 ms away) is prepared at once.
    assert table.prepares_due(t0 + 200) == [(t0 + SECOND, ["a"])]


def test_without_preparation_only_slots_wake_the_dispatcher() -> None:
    t0 = 1_764_000_000_000
    table = timetable(t0 + 10 * SECOND, 0, a="* * * * *")
    assert table.wake_at() == t0 + 60 * SECOND
    assert table.prepares_due(t0 + 60 * SECOND) == []


class PreparingStore(MemoryStore):
    """memory:// that records each preparation (with the store's clock), or fails them all."""

    def __init__(self, *args: object, fail: BaseException | None = None, **kwargs: object) -> None:
        super().__init__(*args, **kwargs)  # type: ignore[arg-type]
        self.fail = fail
        self.prepared: list[tuple[list[str], int, int]] = []

    @property
    def prepare_ahead_ms(self) -> int:
        return 400

    async def prepare(self, jobs: Sequence[str], slot: int) -> None:
        self.prepared.append((list(jobs), slot, await self.now_ms()))
        if self.fail is not None:
            raise self.fail


def preparing_store(name: str, fail: BaseException | None = None) -> PreparingStore:
    base = MemoryStore.create(name)
    return PreparingStore(base.url, base.options, fail=fail)


@pytest.mark.slow
async def test_the_scheduler_prepares_each_slot_ahead_then_claims_it() -> None:
    store = preparing_store("prepare-ahead")
    assert isinstance(store, SupportsPrepare)
    ran: list[int] = []
    s = Scheduler(store, instance="a", environ={})

    @s.job("* * * * * *", name="tick", max_late="500ms")
    def tick(run: Run) -> None:
        ran.append(run.slot)

    @s.job("* * * * * *", name="tock", max_late="500ms")
    def tock(run: Run) -> None:
        pass

    async with s:
        await eventually(lambda: len(ran) >= 3, 10, "three runs")
    prepared = {slot: (jobs, at) for jobs, slot, at in store.prepared}
    later = [slot for slot in ran[1:] if slot in prepared]
    assert later, f"no slot that ran was prepared: ran {ran}, prepared {sorted(prepared)}"
    for slot in later:
        jobs, at = prepared[slot]
        assert sorted(jobs) == ["tick", "tock"]
        assert at < slot, "prepared after its slot had come"


@pytest.mark.parametrize(
    "failure",
    [StoreUnavailable("the broker went away"), RuntimeError("a bug in the backend")],
    ids=["store-down", "bug"],
)
@pytest.mark.slow
async def test_a_failed_preparation_is_logged_and_the_slot_still_runs(
    failure: BaseException, caplog: pytest.LogCaptureFixture
) -> None:
    store = preparing_store(f"prepare-fails-{type(failure).__name__}", fail=failure)
    ran: list[int] = []
    s = Scheduler(store, instance="a", environ={})

    @s.job("* * * * * *", name="tick", max_late="500ms")
    def tick(run: Run) -> None:
        ran.append(run.slot)

    with caplog.at_level(logging.DEBUG, logger="anarchon.scheduler"):
        async with s:
            await eventually(lambda: len(store.prepared) >= 2 and len(ran) >= 2, 10, "runs")
    prepared_slots = {slot for _, slot, _ in store.prepared}
    assert prepared_slots & set(ran), "a slot whose preparation failed must still run"
    assert any("preparing slot" in r.getMessage() for r in caplog.records)
    assert s.store_health.down_since is None, "a failed preparation is not an outage"
