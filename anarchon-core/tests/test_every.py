"""Interval schedules (issue #26, item 5): ``every="30s"`` with an optional ``offset``, slots
aligned to the Unix epoch so that every instance computes the same ones without talking.

Unit tests of the slots (alignment, offset, bounds, no daylight saving), the validation of the
job settings, the defaults that follow the interval, the timetable, ``anarchon next --every``
and the dashboard's schedule column; then three real processes on one SQLite file, whose
every slot must run exactly once."""

from __future__ import annotations

import asyncio
import itertools
import json
import os
import signal
import sqlite3
import subprocess
import sys
import time
from collections import Counter, defaultdict
from collections.abc import Callable, Iterator
from datetime import datetime, timedelta
from pathlib import Path
from typing import Any
from zoneinfo import ZoneInfo

import pytest
from click.testing import CliRunner, Result
from hypothesis import given
from hypothesis import strategies as st

import anarchon
from anarchon import ConfigError, MemoryStore, Run, RunStatus, Scheduler
from anarchon._claims import MAX_SLOT_MS
from anarchon._runtime.cron_fields import EARLIEST_MS, EndOfTime
from anarchon._runtime.interval import Interval, JobSchedule, duration_text
from anarchon._runtime.jobs import make_job
from anarchon._runtime.timetable import Timetable
from anarchon.cli import cli
from anarchon.cli._status import JobStatus, Snapshot
from anarchon.dashboard._view import build_view
from anarchon_test_support import eventually

HOUR = 3_600_000
JAN_1 = 1_735_689_600_000  # 2025-01-01T00:00:00Z


def ms(text: str) -> int:
    return int(datetime.fromisoformat(text).timestamp() * 1000)


def scheduler() -> Scheduler:
    return Scheduler(MemoryStore.create(), instance="a", environ={})


def nothing() -> None:
    pass


# -- slots ------------------------------------------------------------------------------------


def test_slots_are_whole_intervals_from_the_epoch() -> None:
    every_30s = Interval.parse("30s")
    assert every_30s.next_slot(0) == 30_000
    assert every_30s.next_slot(29_999) == 30_000
    assert every_30s.next_slot(30_000) == 60_000  # strictly after
    assert list(every_30s.slots_between(JAN_1 - 1, JAN_1 + 60_000)) == [
        JAN_1,
        JAN_1 + 30_000,
        JAN_1 + 60_000,
    ]
    assert every_30s.previous_slots(JAN_1 + 65_000, 60_000) == [JAN_1 + 30_000, JAN_1 + 60_000]


def test_the_offset_shifts_the_slots_within_the_interval() -> None:
    quarter_past = Interval.parse("1h", offset="15m")
    assert quarter_past.next_slot(0) == 15 * 60_000
    after = ms("2025-01-01T00:20:00+00:00")
    slots = [s.slot_ms for s in quarter_past.upcoming(3, after)]
    assert slots == [ms(f"2025-01-01T0{h}:15:00+00:00") for h in (1, 2, 3)]


def test_a_daily_interval_fires_at_midnight_utc_and_its_offset_sets_the_hour() -> None:
    assert Interval.parse("1d").next_slot(JAN_1 + 1) == JAN_1 + 24 * HOUR
    assert Interval.parse("1d", offset="6h").next_slot(JAN_1) == JAN_1 + 6 * HOUR


@given(
    every_s=st.integers(1, 400 * 86_400),
    offset_fraction=st.floats(0, 1, exclude_max=True),
    after=st.integers(EARLIEST_MS, MAX_SLOT_MS - 2 * 400 * 86_400_000),
)
def test_the_next_slot_is_the_first_aligned_instant_after(
    every_s: int, offset_fraction: float, after: int
) -> None:
    every = every_s * 1000
    offset = int(every_s * offset_fraction) * 1000
    slot = Interval(every_ms=every, offset_ms=offset).next_slot(after)
    assert (slot - offset) % every == 0
    assert after < slot <= after + every


def test_instances_started_at_different_times_compute_the_same_slots() -> None:
    # Each instance knows only its settings and its own start time.
    early = list(Interval.parse("7s", offset="3s").slots_between(JAN_1 + 1_234, JAN_1 + 120_000))
    late = list(Interval.parse("7s", offset="3s").slots_between(JAN_1 + 50_321, JAN_1 + 120_000))
    assert late and set(late) <= set(early)
    assert all((slot - 3000) % 7000 == 0 for slot in early)


@pytest.mark.parametrize(
    "day",
    ["2025-03-30", "2025-10-26"],  # Europe/Berlin's clock changes (spring forward, fall back)
)
def test_daylight_saving_is_irrelevant_every_hour_is_24_slots_a_day(day: str) -> None:
    start = ms(f"{day}T00:00:00+00:00") - 1
    slots = list(Interval.parse("1h").slots_between(start, start + 24 * HOUR))
    assert len(slots) == 24
    assert {b - a for a, b in itertools.pairwise(slots)} == {HOUR}


def test_a_daily_interval_stays_on_utc_while_the_local_clock_changes() -> None:
    berlin = ZoneInfo("Europe/Berlin")
    slots = Interval.parse("1d").upcoming(3, ms("2025-03-29T00:00:00+00:00"))
    local = [datetime.fromtimestamp(s.slot_ms // 1000, berlin).strftime("%H:%M") for s in slots]
    assert local == ["01:00", "02:00", "02:00"]  # 00:00 UTC: CET, then CEST
    assert {s.dst_note for s in slots} == {""}


def test_the_end_of_year_9999_ends_the_slots() -> None:
    hourly = Interval.parse("1h")
    last = hourly.next_slot(MAX_SLOT_MS - HOUR - 1)
    assert last <= MAX_SLOT_MS
    with pytest.raises(EndOfTime, match="end of year 9999"):
        hourly.next_slot(last)
    assert [s.slot_ms for s in hourly.upcoming(5, last - 1)] == [last]
    with pytest.raises(ConfigError, match="before the year 1000"):
        hourly.next_slot(EARLIEST_MS - 1)


def test_the_text_reads_back_as_the_same_settings() -> None:
    assert Interval.parse("30s").text == "every 30s"
    assert Interval.parse("1h", offset="15m").text == "every 1h offset 15m"
    assert Interval.parse("90m", offset="1m30s").text == "every 1h30m offset 1m30s"
    assert duration_text(86_400_000 + 1000) == "1d1s"


# -- job settings -------------------------------------------------------------------------------


def test_every_job_by_decorator_and_by_add_job() -> None:
    s = scheduler()

    @s.job(every="30s")
    def report() -> None: ...

    spec = s.add_job(nothing, every=timedelta(hours=1), offset=15 * 60_000, name="hourly")
    assert s.jobs["report"].schedule == Interval(every_ms=30_000)
    assert spec.schedule == Interval(every_ms=HOUR, offset_ms=15 * 60_000)
    assert str(spec.schedule) == "every 1h offset 15m"


@pytest.mark.parametrize(
    ("settings", "fragments"),
    [
        ({}, ["exactly one of cron and every", "neither"]),
        ({"cron": "* * * * *", "every": "1m"}, ["exactly one of cron and every", "both"]),
        ({"every": "500ms"}, ["every '500ms' is 500 ms, not whole seconds", "'1s'"]),
        ({"every": "1500ms"}, ["not whole seconds", "'1s' or '2s'"]),
        ({"every": 0}, ["every must be positive"]),
        ({"every": "soon"}, ["every 'soon' is not a duration"]),
        ({"every": "1m", "offset": "1m"}, ["offset '1m' is not shorter than every '1m'", "59s"]),
        ({"every": "1m", "offset": "10500ms"}, ["offset '10500ms'", "not whole seconds"]),
        ({"every": "1m", "offset": "-1s"}, ["offset '-1s' is not a duration"]),
        ({"cron": "* * * * *", "offset": "5s"}, ["offset='5s' applies to every= only"]),
        ({"every": "1h", "tz": "Europe/Berlin"}, ["tz='Europe/Berlin' does not apply to every="]),
    ],
)
def test_bad_schedules_are_config_errors_naming_the_settings(
    settings: dict[str, Any], fragments: list[str]
) -> None:
    with pytest.raises(ConfigError) as caught:
        scheduler().add_job(nothing, name="pulse", **settings)
    message = str(caught.value)
    assert message.startswith("job 'pulse': "), message
    for fragment in fragments:
        assert fragment in message


def test_utc_by_any_name_is_accepted_with_every() -> None:
    for zone in ("UTC", "Etc/UTC"):
        assert scheduler().add_job(nothing, every="1m", tz=zone).schedule == Interval(
            every_ms=60_000
        )


@pytest.mark.parametrize(
    ("every", "max_late_ms"), [("1s", 1000), ("10s", 10_000), ("60s", 60_000), ("5m", 60_000)]
)
def test_max_late_defaults_to_the_interval_capped_at_60_s(every: str, max_late_ms: int) -> None:
    assert scheduler().add_job(nothing, every=every).max_late_ms == max_late_ms


def test_an_explicit_max_late_wins_over_the_interval() -> None:
    spec = make_job(
        nothing,
        cron=None,
        every="1h",
        name=None,
        tz="UTC",
        lease=None,
        max_late="5m",
        overlap=None,
        attempts=3,
        heartbeat=None,
    )
    assert spec.max_late_ms == 300_000


def test_the_timetable_fires_interval_slots_and_records_the_late_ones() -> None:
    spec = scheduler().add_job(nothing, every="10s", offset="3s", name="pulse", catch_up="all")
    now = JAN_1 + 25_000
    table = Timetable({"pulse": spec}, now, clock_skew_ms=0)
    due = table.slot_due(now)
    assert due is not None and due.slot == JAN_1 + 23_000  # within max_late (10 s) at start
    assert [s.name for s in due.fresh] == ["pulse"]
    assert table.slot_due(now) is None
    assert table.wake_at() == JAN_1 + 33_000
    # A stall of a minute: the slots later than max_late are given to be recorded skipped.
    due = table.slot_due(JAN_1 + 95_000)
    assert due is not None
    assert due.late == {"pulse": [JAN_1 + 33_000 + k * 10_000 for k in range(6)]}  # < 85 s
    assert table.wake_at() == JAN_1 + 93_000


async def test_a_scheduler_catches_up_interval_slots_at_start() -> None:
    store = MemoryStore.create()
    s = Scheduler(store, instance="a", environ={})
    ran: list[int] = []

    @s.job(every="2s", offset="1s", max_late="6s", catch_up="all")
    def pulse(run: Run) -> None:
        ran.append(run.slot)

    now = await store.now_ms()
    async with s:
        await eventually(lambda: len(ran) >= 3, 5, "the 3 slots of the last 6 s")
    records = await store.history("pulse", 100)
    first = min(ran)
    # The oldest slot within max_late of the start (a few ms after `now`), then the next ones.
    assert now - 6000 <= first <= now - 4000 + 500, (now, sorted(ran))
    assert sorted(ran)[:3] == [first, first + 2000, first + 4000]
    assert all(r.slot % 2000 == 1000 for r in records), records
    assert all(r.status is RunStatus.SUCCEEDED for r in records if r.slot in ran), records


# -- where the schedule is shown ----------------------------------------------------------------


def invoke(*args: str) -> Result:
    return CliRunner().invoke(cli, list(args), prog_name="anarchon")


def test_next_lists_the_slots_of_an_interval() -> None:
    result = invoke("next", "--every", "1h", "--offset", "15m", "-n", "3", "--after", "2025-01-01")
    assert result.exit_code == 0, result.output
    assert "every 1h offset 15m" in result.output
    for hour in (0, 1, 2):
        assert f"2025-01-01T0{hour}:15:00Z" in result.output
        assert str(ms(f"2025-01-01T0{hour}:15:00+00:00")) in result.output
    assert "2025-01-01T03:15:00Z" not in result.output


def test_next_every_as_json_has_the_fields_of_the_cron_form() -> None:
    result = invoke(
        "next", "--every", "30s", "-n", "2", "--after", "2025-01-01T00:00:00Z", "--json"
    )
    assert result.exit_code == 0, result.output
    assert json.loads(result.output) == [
        {
            "slot_ms": JAN_1 + 30_000,
            "utc": "2025-01-01T00:00:30Z",
            "local": "2025-01-01T00:00:30+00:00",
            "dst_note": None,
        },
        {
            "slot_ms": JAN_1 + 60_000,
            "utc": "2025-01-01T00:01:00Z",
            "local": "2025-01-01T00:01:00+00:00",
            "dst_note": None,
        },
    ]


@pytest.mark.parametrize(
    ("args", "fragment"),
    [
        (["next"], "give one of CRON and --every, got neither"),
        (["next", "* * * * *", "--every", "1m"], "give one of CRON and --every, got both"),
        (["next", "* * * * *", "--offset", "5s"], "--offset applies to --every only"),
        (["next", "--every", "1m", "--tz", "Europe/Berlin"], "does not apply to --every"),
        (["next", "--every", "1m", "--offset", "2m"], "--offset '2m' is not shorter than --every"),
        (["next", "--every", "250ms"], "--every '250ms' is 250 ms, not whole seconds"),
    ],
)
def test_next_bad_interval_input_is_a_one_line_error(args: list[str], fragment: str) -> None:
    result = invoke(*args)
    assert result.exit_code == 2, result.output
    assert result.stdout == ""
    assert len(result.stderr.splitlines()) == 1, result.stderr
    assert fragment in result.stderr


def test_the_dashboard_shows_every_and_the_next_slots_in_utc() -> None:
    snapshot = Snapshot(
        store="memory://x",
        now_ms=JAN_1,
        jobs=(
            JobStatus(job="pulse", latest=(), counts={}, counted=0),
            JobStatus(job="report", latest=(), counts={}, counted=0),
        ),
    )
    schedules: dict[str, JobSchedule] = {
        "pulse": Interval.parse("1h", offset="15m"),
        "report": anarchon.Schedule.parse("*/5 * * * *", "Europe/Paris"),
    }
    view = build_view(snapshot, schedules)
    pulse, report = view.jobs
    assert pulse.schedule == "every 1h offset 15m"
    assert pulse.next_slots[0].utc == "2025-01-01 00:15:00Z"
    assert pulse.next_slots[0].local.startswith("2025-01-01 Wed 00:15:00 UTC")
    assert report.schedule == "*/5 * * * * (Europe/Paris)"


# -- three processes ----------------------------------------------------------------------------

WORKER = Path(__file__).with_name("every_worker.py")


class Fleet:
    def __init__(self, tmp_path: Path) -> None:
        self.store = tmp_path / "store.db"
        self.journal = tmp_path / "journal.db"
        self.tmp = tmp_path
        self.procs: list[subprocess.Popen[str]] = []

    def start(self, count: int, every: str, offset: str) -> None:
        """One after another, each once the previous one is up: the instances start at
        different times, as in a rolling deploy, and must still compute the same slots."""
        for n in range(count):
            with (self.tmp / f"worker-{n}.log").open("w") as stderr:
                proc = subprocess.Popen(
                    [sys.executable, WORKER, self.store, self.journal, every, offset],
                    stdout=subprocess.PIPE,
                    stderr=stderr,
                    text=True,
                )
            self.procs.append(proc)
            assert proc.stdout is not None
            assert proc.stdout.readline().strip() == "ready", self.logs()

    def rows(self, sql: str) -> list[tuple[Any, ...]]:
        if not self.journal.exists():
            return []
        db = sqlite3.connect(self.journal, timeout=30)
        try:
            return list(db.execute(sql))
        except sqlite3.OperationalError:
            return []
        finally:
            db.close()

    def logs(self) -> str:
        return "\n".join(p.read_text()[-2000:] for p in self.tmp.glob("worker-*.log"))

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


@pytest.fixture
def fleet(tmp_path: Path) -> Iterator[Fleet]:
    pytest.importorskip("anarchon_sqlite")
    f = Fleet(tmp_path)
    yield f
    f.stop()


def wait_until(condition: Callable[[], bool], timeout: float, what: str, fleet: Fleet) -> None:
    deadline = time.monotonic() + timeout
    while not condition():
        if time.monotonic() > deadline:
            pytest.fail(f"timed out after {timeout} s waiting for {what}\n{fleet.logs()}")
        time.sleep(0.05)


@pytest.mark.processes
@pytest.mark.slow
def test_three_processes_run_every_interval_slot_exactly_once(fleet: Fleet) -> None:
    fleet.start(3, "2s", "1s")
    started = time.time_ns() // 1_000_000
    wanted = 8

    def enough() -> bool:
        return len(fleet.rows(f"SELECT DISTINCT slot FROM runs WHERE slot > {started}")) >= wanted

    wait_until(enough, 2 * wanted + 15, f"{wanted} slots after the start", fleet)
    fleet.stop()
    assert [p.returncode for p in fleet.procs] == [0, 0, 0], fleet.logs()

    async def read_history() -> list[anarchon.RunRecord]:
        async with anarchon.connect(f"sqlite:///{fleet.store}") as store:
            return await store.history("pulse", 1000)

    # The store's ledger: every slot from the first to the last, once, on the odd seconds.
    history = sorted(asyncio.run(read_history()), key=lambda r: r.slot)
    ledger = [r.slot for r in history]
    assert len(ledger) == len(set(ledger)), f"a slot has two records: {ledger}"
    assert ledger == list(range(ledger[0], ledger[-1] + 1, 2000)), f"a slot is missing: {ledger}"
    assert all(slot % 2000 == 1000 for slot in ledger), f"slots off the offset: {ledger}"
    window = [r for r in history if r.slot > started]
    assert len(window) >= wanted
    assert all(r.status is RunStatus.SUCCEEDED and r.attempt == 1 for r in window), window
    # The processes' own journal agrees: each of those slots ran once, by the holder on record.
    runs = fleet.rows("SELECT slot, pid FROM runs")
    ran = Counter(slot for slot, _ in runs)
    assert not [s for s, n in ran.items() if n > 1], f"slots that ran twice: {ran}"
    by_slot: dict[int, int] = dict(runs)
    for record in window:
        assert record.holder == f"pid-{by_slot[record.slot]}", (record, by_slot)
    # And every process claimed each of them: the slots were computed alike, a race was run
    # (the fleet's two contenders at the slot, its watcher half a second later; the stop may
    # come before the last slot's watcher claims, so that slot is left out).
    claimants: dict[int, set[int]] = defaultdict(set)
    won: Counter[int] = Counter()
    for slot, outcome, pid in fleet.rows("SELECT slot, outcome, pid FROM claims"):
        claimants[slot].add(pid)
        won[slot] += outcome == "won"
    for record in window[:-1]:
        assert len(claimants[record.slot]) == 3, (record.slot, claimants[record.slot])
        assert won[record.slot] == 1, (record.slot, won[record.slot])
