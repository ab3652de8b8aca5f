"""Control through the store, as the runtime and the CLI use it (issue #26, items 1 and 2), on
memory:// in one process: a pause (P1) is logged once per job and shown in `health()`; triggers
(X1) are polled, claimed by every instance that has the job and run once; ``anarchon pause``,
``resume``, ``trigger`` and the marks in ``status`` and ``history``. The same with three real
processes on SQLite, PostgreSQL and Redis is in test_control_fleet.py."""

from __future__ import annotations

import asyncio
import itertools
import json
import logging
import threading
import time
from collections.abc import Callable, Iterator

import pytest
from click.testing import CliRunner, Result

import anarchon
from anarchon import ClaimRequest, ConfigError, MemoryStore, Run, RunStatus, Scheduler
from anarchon._runtime.control import TRIGGER_MIN_LATE_MS, trigger_max_late_ms
from anarchon._runtime.jobs import make_job
from anarchon._runtime.settings import load_settings
from anarchon.cli import cli
from anarchon.cli._control import by_whom, parse_until
from anarchon_test_support import eventually

YEARLY = "0 0 1 1 *"  # fires on New Year only: any run in a test is a triggered one
_names = itertools.count()


def unique(base: str) -> str:
    """A memory:// namespace of this test alone (namespaces live as long as the process)."""
    return f"{base}-{next(_names)}-{time.monotonic_ns() % 1_000_000}"


def scheduler(store: anarchon.ClaimStore, name: str, **kwargs: object) -> Scheduler:
    return Scheduler(store, instance=name, environ={}, **kwargs)  # type: ignore[arg-type]


def invoke(*args: str) -> Result:
    return CliRunner().invoke(cli, list(args), catch_exceptions=False)


# -- settings -----------------------------------------------------------------------------------


def test_trigger_poll_defaults_to_2_s_and_reads_the_environment() -> None:
    assert load_settings(environ={}).trigger_poll_ms == 2000
    assert load_settings(environ={"ANARCHON_TRIGGER_POLL": "500ms"}).trigger_poll_ms == 500
    assert load_settings(environ={"ANARCHON_TRIGGER_POLL": "0"}).trigger_poll_ms == 0
    assert load_settings({"trigger_poll": "5s"}, environ={}).trigger_poll_ms == 5000


@pytest.mark.parametrize(("value", "fragment"), [("-1s", "not a duration"), ("2h", "longer")])
def test_a_bad_trigger_poll_is_a_config_error_naming_it(value: str, fragment: str) -> None:
    with pytest.raises(ConfigError, match="trigger_poll") as caught:
        load_settings(environ={"ANARCHON_TRIGGER_POLL": value})
    assert fragment in str(caught.value)
    assert "ANARCHON_TRIGGER_POLL" in str(caught.value)


def test_a_triggered_slot_may_start_a_minute_or_three_polls_late_within_T3() -> None:
    def spec(max_late: str) -> object:
        return make_job(
            lambda: None,
            cron="* * * * *",
            every=None,
            offset=None,
            name="j",
            tz="UTC",
            lease=None,
            max_late=max_late,
            overlap=None,
            attempts=3,
            heartbeat=None,
            catch_up=None,
            timeout=None,
        )

    assert trigger_max_late_ms(spec("1s"), 2000) == TRIGGER_MIN_LATE_MS  # type: ignore[arg-type]
    assert trigger_max_late_ms(spec("1s"), 30_000) == 90_000  # type: ignore[arg-type]
    assert trigger_max_late_ms(spec("5m"), 2000) == 300_000  # type: ignore[arg-type]
    # T3: on a store that forgets claims, never longer than it remembers (less the skew).
    flags = dict.fromkeys(
        ("leases", "self_recognition", "fencing", "overlap", "history", "store_clock"), False
    )
    window = anarchon.Capabilities(remembers_ms=30_000, **flags)
    assert trigger_max_late_ms(spec("1s"), 2000, window, clock_skew_ms=1000) == 29_000  # type: ignore[arg-type]
    short = anarchon.Capabilities(remembers_ms=1500, **flags)
    assert trigger_max_late_ms(spec("1s"), 2000, short, clock_skew_ms=1000) == 1000  # type: ignore[arg-type]


def test_run_triggered_tells_a_triggered_slot_from_a_scheduled_one() -> None:
    def run(slot: int) -> Run:
        return Run(job="j", slot=slot, attempt=1, token="0" * 32, deadline=None)

    assert not run(1_700_000_000_000).triggered
    assert run(1_700_000_000_001).triggered


# -- triggers in the runtime ----------------------------------------------------------------------


async def test_X1_a_trigger_runs_the_job_once_on_one_of_three_instances() -> None:
    name = unique("trigger3")
    runs: list[tuple[int, str, bool]] = []
    instances = []
    for i in range(3):
        s = scheduler(MemoryStore.create(name), f"i{i}", trigger_poll="50ms")

        @s.job(YEARLY, name="report")
        async def report(run: Run, me: str = f"i{i}") -> None:
            runs.append((run.slot, me, run.triggered))

        instances.append(s)
    async with anarchon.connect(f"memory://{name}") as store:
        assert isinstance(store, anarchon.SupportsTrigger)
        for s in instances:
            await s.start()
        try:
            made = await store.trigger("report", reason="test", by="me@here")
            # Every instance claims it: one wins, the others see it running or done.
            await eventually(
                lambda: all(s.last_claims.get("report", (0,))[0] == made.slot for s in instances),
                10,
                "every instance claimed the triggered slot",
            )
            await eventually(lambda: bool(runs), 10, "the triggered run")
            history = await store.history("report", 10)
        finally:
            for s in instances:
                await s.stop()
    assert [(slot, triggered) for slot, _, triggered in runs] == [(made.slot, True)]
    [record] = history
    assert (record.slot, record.status, record.holder) == (
        made.slot,
        RunStatus.SUCCEEDED,
        runs[0][1],
    )


async def test_a_trigger_written_before_the_instance_started_is_not_lost() -> None:
    name = unique("before")
    ran = asyncio.Event()
    async with anarchon.connect(f"memory://{name}") as store:
        made = await store.trigger("report")  # type: ignore[attr-defined]
        s = scheduler(MemoryStore.create(name), "late-starter", trigger_poll="50ms")

        @s.job(YEARLY, name="report")
        async def report(run: Run) -> None:
            assert run.slot == made.slot
            ran.set()

        async with s:
            await asyncio.wait_for(ran.wait(), 10)


async def test_triggers_of_jobs_the_instance_does_not_have_are_ignored() -> None:
    name = unique("other")
    s = scheduler(MemoryStore.create(name), "i0", trigger_poll="1h")

    @s.job(YEARLY, name="mine")
    def mine() -> None: ...

    async with anarchon.connect(f"memory://{name}") as store, s:
        await store.trigger("theirs")  # type: ignore[attr-defined]
        assert s.dispatcher.triggers is not None
        assert await s.dispatcher.triggers.poll() == []
        assert await store.history("theirs", 10) == []


async def test_a_trigger_found_after_its_max_late_is_recorded_skipped_late() -> None:
    name = unique("old")
    offset = [0]

    def clock() -> int:
        return time.time_ns() // 1_000_000 + offset[0]

    store = MemoryStore.create(name, clock=clock)
    made = await store.trigger("report")
    offset[0] = TRIGGER_MIN_LATE_MS + 500  # the fleet was down for over a minute
    s = scheduler(MemoryStore.create(name, clock=clock), "i0", trigger_poll="50ms")

    @s.job(YEARLY, name="report")
    def report() -> None:
        pytest.fail("a trigger older than its max_late ran")

    async with s:
        await eventually(lambda: "report" in s.last_claims, 10, "the claim of the old trigger")
    [record] = await store.history("report", 10)
    assert record.slot == made.slot
    assert record.status is RunStatus.SKIPPED
    assert record.error is not None and record.error.startswith("late:")


async def test_a_triggered_run_may_start_later_than_the_jobs_own_max_late() -> None:
    name = unique("grace")
    offset = [0]

    def clock() -> int:
        return time.time_ns() // 1_000_000 + offset[0]

    store = MemoryStore.create(name, clock=clock)
    made = await store.trigger("report")
    offset[0] = 5000  # found 5 s later: beyond the job's max_late, within a minute
    ran = asyncio.Event()
    s = scheduler(MemoryStore.create(name, clock=clock), "i0", trigger_poll="50ms")

    @s.job(YEARLY, name="report", max_late="1s")
    async def report(run: Run) -> None:
        assert run.slot == made.slot and run.triggered
        ran.set()

    async with s:
        await asyncio.wait_for(ran.wait(), 10)


async def test_trigger_poll_0_turns_polling_off() -> None:
    s = scheduler(MemoryStore.create(), "i0", trigger_poll=0)

    @s.job(YEARLY, name="report")
    def report() -> None: ...

    async with s:
        assert s.dispatcher.triggers is None


# -- pauses in the runtime ------------------------------------------------------------------------


@pytest.mark.slow
async def test_P1_a_pause_is_logged_once_per_job_and_shown_in_health(
    caplog: pytest.LogCaptureFixture,
) -> None:
    name = unique("pause")
    runs: list[int] = []
    instances = []
    for i in range(2):
        s = scheduler(MemoryStore.create(name), f"i{i}", trigger_poll=0)

        @s.job("* * * * * *", name="tick", max_late="500ms")
        async def tick(run: Run) -> None:
            runs.append(run.slot)

        instances.append(s)
    caplog.set_level(logging.INFO, logger="anarchon")
    async with anarchon.connect(f"memory://{name}") as store:
        assert isinstance(store, anarchon.SupportsPause)
        for s in instances:
            await s.start()
        try:
            await eventually(lambda: bool(runs), 10, "a first run")
            paused = await store.pause("tick", reason="freeze", by="me@here")

            def skips() -> list[anarchon.RunRecord]:
                return [r for r in records if r.status is RunStatus.SKIPPED]

            records: list[anarchon.RunRecord] = []
            deadline = time.monotonic() + 10
            while len(skips()) < 3:
                assert time.monotonic() < deadline, records
                await asyncio.sleep(0.1)
                records = await store.history("tick", 100)
            assert all(r.error == "paused: freeze" for r in skips()), skips()
            # No run starts after the pause was written plus one slot.
            assert [slot for slot in runs if slot > paused.since_ms + 1000] == []
            for s in instances:
                assert s.health().paused == {"tick": "paused: freeze"}
                assert s.health().to_dict()["paused"] == {"tick": "paused: freeze"}
            told = [r for r in caplog.records if "is paused" in r.getMessage()]
            assert len(told) == len(instances), [r.getMessage() for r in told]
            assert "job tick is paused (freeze) by me@here: slots skipped until resumed" in (
                told[0].getMessage()
            )
            per_slot = [
                r
                for r in caplog.records
                if r.getMessage().startswith("claim tick@") and r.levelno >= logging.INFO
            ]
            assert not [r for r in per_slot if "paused" in r.getMessage()]

            assert await store.resume("tick")
            resumed_at = await store.now_ms()
            await eventually(lambda: any(slot > resumed_at for slot in runs), 10, "a run again")
            await eventually(
                lambda: all(not s.health().paused for s in instances), 10, "health unpaused"
            )
            assert [r for r in caplog.records if "no longer paused" in r.getMessage()]
        finally:
            for s in instances:
                await s.stop()


# -- the CLI --------------------------------------------------------------------------------------


def test_by_names_the_user_and_the_host() -> None:
    who = by_whom()
    assert "@" in who and who.isprintable() and len(who) <= 200


def test_until_reads_a_duration_or_an_iso_time_and_refuses_the_past() -> None:
    now = 1_735_689_600_000  # 2025-01-01T00:00:00Z
    assert parse_until("2h", now) == now + 7_200_000
    assert parse_until("2025-01-02T00:00Z", now) == now + 86_400_000
    with pytest.raises(ConfigError, match="not in the future"):
        parse_until("2024-12-31T23:00", now)
    with pytest.raises(ConfigError, match="--until 'soon' is not an ISO 8601 time"):
        parse_until("soon", now)


def test_pause_status_resume_on_the_command_line() -> None:
    url = f"memory://{unique('cli')}"
    done = invoke("pause", url, "report", "--until", "1h", "--reason", "deploy freeze")
    assert done.exit_code == 0, done.output
    assert "paused job 'report'" in done.output and "(deploy freeze)" in done.output
    status = invoke("status", url, "--job", "report", "--json")
    assert status.exit_code == 0, status.output
    data = json.loads(status.output)
    [pause] = data["paused"]
    assert (pause["job"], pause["reason"]) == ("report", "deploy freeze")
    assert pause["by"] == by_whom() and pause["until"].endswith("Z")
    assert data["jobs"][0]["paused"] == pause
    text = invoke("status", url, "--job", "report", "--once")
    assert "paused" in text.output and "deploy freeze" in text.output
    assert invoke("resume", url, "report").output.startswith("resumed job 'report'")
    assert "was not paused" in invoke("resume", url, "report").output
    assert json.loads(invoke("status", url, "--job", "report", "--json").output)["paused"] == []


@pytest.mark.parametrize(
    ("args", "fragment"),
    [
        (["pause", "memory://x", "report", "--until", "2020-01-01T00:00Z"], "not in the future"),
        (["pause", "memory://x", "bad name"], "job name"),
        (["pause", "memory://x", "report", "--reason", "two\nlines"], "printable"),
        (["pause", "nats://127.0.0.1:1", "report"], "cannot pause jobs"),
        (["trigger", "redis://127.0.0.1:1/0?strategy=stream-id", "report"], "cannot trigger"),
        (["trigger", "memory://x", "report", "--wait", "0"], "0<x<=86400"),
    ],
)
def test_control_errors_are_one_line_with_exit_code_2(args: list[str], fragment: str) -> None:
    if args[1].startswith(("nats", "redis")):
        pytest.importorskip(f"anarchon_{args[1].split(':')[0]}")
    result = CliRunner().invoke(cli, args)
    assert result.exit_code == 2, result.output
    assert fragment in result.output


def test_the_capability_error_names_the_backends_that_have_it() -> None:
    pytest.importorskip("anarchon_nats")
    result = CliRunner().invoke(cli, ["resume", "nats://127.0.0.1:1", "report"])
    assert "memory://, sqlite://, postgresql:// and redis://" in result.output
    assert result.exit_code == 2


def test_history_and_status_mark_triggered_runs() -> None:
    name = unique("marks")
    url = f"memory://{name}"

    async def run_one_trigger() -> int:
        async with anarchon.connect(url) as store:
            made = await store.trigger("report")  # type: ignore[attr-defined]
            request = ClaimRequest(job="report", slot=made.slot, instance="cli-test")
            claim = await store.claim(request)
            assert claim.won
            assert isinstance(store, anarchon.LeaseStore)
            await store.finish("report", made.slot, request.token, RunStatus.SUCCEEDED)
            return int(made.slot)

    slot = asyncio.run(run_one_trigger())
    records = json.loads(invoke("history", url, "report", "--json").output)
    assert [(r["slot_ms"], r["triggered"]) for r in records] == [(slot, True)]
    assert "triggered" in invoke("history", url, "report").output
    latest = json.loads(invoke("status", url, "--json").output)["jobs"][0]["latest"]
    assert latest[0]["triggered"] is True


@pytest.fixture
def serving() -> Iterator[Callable[[Callable[[], None]], str]]:
    """A scheduler in a background thread (as a sync application runs it) on a memory://
    namespace, with the given function as its yearly job ``report``; yields its URL."""
    started: list[Scheduler] = []

    def serve(job: Callable[[], None]) -> str:
        url = f"memory://{unique('serve')}"
        s = Scheduler(url, instance="worker-1", trigger_poll="50ms", environ={})
        s.add_job(job, YEARLY, name="report")
        s.start()
        started.append(s)
        return url

    yield serve
    for s in started:
        s.shutdown()


def test_trigger_wait_prints_who_ran_it(serving: Callable[[Callable[[], None]], str]) -> None:
    ran = threading.Event()
    url = serving(ran.set)
    result = invoke("trigger", url, "report", "--reason", "now please", "--wait", "20")
    assert result.exit_code == 0, result.output
    assert ran.is_set()
    assert "triggered job 'report'" in result.output
    assert "succeeded on worker-1 (attempt 1)" in result.output


def test_trigger_wait_exits_1_when_the_run_failed(
    serving: Callable[[Callable[[], None]], str],
) -> None:
    def broken() -> None:
        raise RuntimeError("disk full")

    result = CliRunner().invoke(cli, ["trigger", serving(broken), "report", "--wait", "20"])
    assert result.exit_code == 1, result.output
    assert "did not succeed: failed on worker-1" in result.output
    assert "disk full" in result.output


def test_trigger_wait_exits_1_when_no_instance_decides_it() -> None:
    result = CliRunner().invoke(cli, ["trigger", f"memory://{unique('nobody')}", "r", "--wait=0.3"])
    assert result.exit_code == 1, result.output
    assert "was not decided within 0.3 s: is an instance with this job running" in result.output
