"""Celery beat on two nodes with anarchon's scheduler: each entry is sent once per slot.

The multi-process test runs the real ``celery`` command: one worker (``--pool solo``) that
journals every task with the slot its message carries, and two ``celery beat`` nodes on one
schedule (an every-second interval entry and an every-minute crontab entry), on a Redis broker
with a queue of the test's own, and a SQLite store. It counts every slot's fate in the worker's
journal and checks it against the store's ledger; one beat node is killed halfway, and the other
carries on. The tests after it drive the scheduler in one process, tick by tick.
"""

from __future__ import annotations

import asyncio
import json
import os
import random
import re
import signal
import socket
import subprocess
import sys
import time
import uuid
from collections import Counter
from collections.abc import Callable, Iterator
from datetime import datetime, timedelta, timezone
from pathlib import Path
from typing import Any
from zoneinfo import ZoneInfo

import pytest

import anarchon
from anarchon import ConfigError, RunRecord, RunStatus, check_name

pytest.importorskip("celery")

from celery import Celery as Celery_
from celery.schedules import BaseSchedule, crontab, schedstate, schedule

from anarchon.integrations.celery import SLOT_HEADER, Scheduler, job_name
from anarchon.integrations.celery._settings import read_settings
from anarchon.integrations.celery._slots import slots_for

HERE = Path(__file__).parent
CELERY = Path(sys.executable).parent / "celery"
BROKER = os.environ.get("ANARCHON_TEST_REDIS_URL", "redis://127.0.0.1:6379/0")
SCHEDULER = "anarchon.integrations.celery:Scheduler"
SECOND = "every-second"
MINUTE = "every.minute"
JOINT_S = 4.0
"""How long both beat nodes run together before one is killed."""
ALONE_S = 3.0
"""How long the other one runs alone after that."""


def wait_for(condition: Callable[[], object], timeout: float, what: str, *logs: Path) -> None:
    deadline = time.monotonic() + timeout
    while not condition():
        if time.monotonic() > deadline:
            tails = "\n".join(f"--- {log.name}\n{log.read_text()[-4000:]}" for log in logs)
            pytest.fail(f"timed out after {timeout} s waiting for {what}\n{tails}")
        time.sleep(0.02)


class Celery:
    """The ``celery`` processes of one test, all stopped at its end."""

    def __init__(self, tmp_path: Path, env: dict[str, str]) -> None:
        self.tmp_path = tmp_path
        self.env = env
        self.procs: list[subprocess.Popen[bytes]] = []

    def start(self, name: str, *args: str, **env: str) -> tuple[subprocess.Popen[bytes], Path]:
        log = self.tmp_path / f"{name}.log"
        with log.open("wb") as out:
            proc = subprocess.Popen(
                [str(CELERY), "-A", "celery_app", *args],
                cwd=HERE,
                env={**os.environ, **self.env, **env},
                stdout=out,
                stderr=subprocess.STDOUT,
            )
        self.procs.append(proc)
        return proc, log

    def worker(self) -> tuple[subprocess.Popen[bytes], Path]:
        queue = self.env["QUEUE"]
        args = ("-Q", queue, "-n", f"{queue}@%h", "--pool", "solo", "-l", "INFO")
        quiet = ("--without-gossip", "--without-mingle", "--without-heartbeat")
        return self.start("worker", "worker", *args, *quiet)

    def beat(self, instance: str) -> tuple[subprocess.Popen[bytes], Path]:
        schedule_file = str(self.tmp_path / f"{instance}-schedule")
        args = ("-S", SCHEDULER, "-s", schedule_file, "-l", "DEBUG")
        return self.start(instance, "beat", *args, INSTANCE=instance)

    def stop_all(self) -> None:
        for proc in self.procs:
            if proc.poll() is None:
                proc.kill()
            proc.wait()


@pytest.fixture
def store(tmp_path: Path) -> tuple[str, str]:
    """A store URL and a prefix of this test's own: a SQLite file (the in-process tests below
    run on Redis too)."""
    return f"sqlite:///{tmp_path / 'anarchon.db'}", f"celery-{uuid.uuid4().hex[:10]}"


@pytest.fixture
def celery(tmp_path: Path, store: tuple[str, str]) -> Iterator[Celery]:
    url, prefix = store
    queue = f"anarchon-test-{uuid.uuid4().hex[:10]}"
    env = {
        "BROKER": BROKER,
        "QUEUE": queue,
        "STORE": url,
        "PREFIX": prefix,
        "JOURNAL": str(tmp_path / "journal.jsonl"),
    }
    processes = Celery(tmp_path, env)
    try:
        yield processes
    finally:
        processes.stop_all()
        from redis import Redis

        with Redis.from_url(BROKER) as client:  # what kombu left of our queue
            client.delete(queue, f"_kombu.binding.{queue}")


def journal(path: Path) -> list[dict[str, Any]]:
    if not path.exists():
        return []
    return [json.loads(line) for line in path.read_text().splitlines() if line.strip()]


def newest_slot(path: Path, entry: str) -> int:
    return max((row["slot"] for row in journal(path) if row["entry"] == entry), default=0)


def ledger(url: str, prefix: str, entry: str) -> dict[int, RunRecord]:
    async def read() -> list[RunRecord]:
        async with anarchon.connect(url, prefix=prefix) as store:
            return await store.history(job_name(entry), limit=1000)

    return {record.slot: record for record in asyncio.run(read())}


def iso(slot: int) -> str:
    return datetime.fromtimestamp(slot / 1000, timezone.utc).isoformat()


def decided(log: Path, entry: str) -> set[str]:
    """The slots (ISO times) a beat node decided for `entry`: sent or not."""
    text, name = log.read_text(), re.escape(entry)
    sent = re.findall(rf"Sending due task {name} \(.*?\), slot (\S+)", text)
    not_sent = re.findall(rf"not sending {name} \(slot (\S+?)\)", text)
    return {*sent, *not_sent}


@pytest.mark.processes
@pytest.mark.services  # the machine's Redis: the broker (and a store)
def test_two_beat_nodes_send_each_entry_once_per_slot(
    celery: Celery, store: tuple[str, str]
) -> None:
    path = Path(celery.env["JOURNAL"])
    worker, worker_log = celery.worker()  # the tasks wait in the queue until it is ready
    (beat_a, log_a), (beat_b, log_b) = celery.beat("beat-a"), celery.beat("beat-b")
    for log in (log_a, log_b):
        wait_for(lambda log=log: "is open" in log.read_text(), 60, "a beat node", log)
    both_up = time.time()

    # Kill one node halfway between two slots, so it holds no claim it has not sent yet.
    wait_for(lambda: newest_slot(path, SECOND) >= (both_up + JOINT_S) * 1000, 30, "slots", log_a)
    wait_for(lambda: 0.4 < time.time() % 1 < 0.6, 2, "the middle of a second")
    beat_a.send_signal(signal.SIGKILL)
    killed = time.time()
    beat_a.wait()

    wait_for(lambda: newest_slot(path, SECOND) >= (killed + ALONE_S) * 1000, 30, "slots", log_b)
    beat_b.send_signal(signal.SIGTERM)
    assert beat_b.wait(30) == 0, log_b.read_text()[-4000:]
    stopped = time.time()

    url, prefix = store
    runs = ledger(url, prefix, SECOND)
    sent = {slot for slot, run in runs.items() if run.status is RunStatus.SUCCEEDED}
    wait_for(
        lambda: sent <= {r["slot"] for r in journal(path) if r["entry"] == SECOND},
        30,
        "the worker to run every task sent",
        worker_log,
    )
    worker.send_signal(signal.SIGTERM)
    worker.wait(30)

    rows = journal(path)
    counts = Counter((row["entry"], row["slot"]) for row in rows)
    assert [key for key, n in counts.items() if n > 1] == [], "a slot was sent twice"

    # Every second from both nodes' start to the stop: exactly one task, the ledger agrees.
    first, last = int(both_up) + 1, int(stopped) - 1
    window = [s * 1000 for s in range(first, last + 1)]
    journaled = {row["slot"] for row in rows if row["entry"] == SECOND}
    assert [iso(s) for s in window if s not in journaled] == [], "slots never sent"
    assert {s for s in journaled if first * 1000 <= s <= last * 1000} == set(window)
    assert sent & set(window) == set(window)
    assert {runs[s].holder for s in window if s > (killed + 1) * 1000} == {"beat-b"}

    # While both ran, each node decided every slot: the claim, not luck, kept them apart.
    joint = [iso(s) for s in window if s < (killed - 1) * 1000]
    assert len(joint) >= JOINT_S - 2
    for log in (log_a, log_b):
        assert set(joint) <= decided(log, SECOND), log.name

    # The crontab entry: each minute that began while a node ran was sent once, at its minute.
    minutes = range(-(-first // 60) * 60_000, last * 1000 + 1, 60_000)
    minute_slots = [row["slot"] for row in rows if row["entry"] == MINUTE]
    assert all(slot % 60_000 == 0 for slot in minute_slots), minute_slots
    assert set(minutes) <= set(minute_slots)


# In one process: the scheduler driven tick by tick, on Celery's in-memory broker.

HOUR_MS = 3_600_000


@pytest.fixture
def app(tmp_path: Path) -> Iterator[Celery_]:
    queue = f"q-{uuid.uuid4().hex[:10]}"
    app = Celery_("anarchon_test", broker="memory://", set_as_current=False)
    app.conf.update(
        broker_connection_retry_on_startup=True,
        task_default_queue=queue,
        anarchon_store=f"sqlite:///{tmp_path / 'anarchon.db'}",
        anarchon_prefix=f"celery-{uuid.uuid4().hex[:10]}",
        beat_schedule={"hourly": {"task": "anarchon_test.hourly", "schedule": timedelta(hours=1)}},
    )
    yield app
    app.close()


@pytest.fixture(params=["sqlite", pytest.param("redis", marks=pytest.mark.services)])
def any_store(request: pytest.FixtureRequest, app: Celery_) -> Iterator[str]:
    """The app's store: its SQLite file, or the machine's Redis (under the app's prefix)."""
    if request.param == "sqlite":
        yield app.conf.anarchon_store
        return
    pytest.importorskip("anarchon_redis")
    from redis.asyncio import Redis

    from anarchon_redis.testing import delete_prefix

    app.conf.anarchon_store = BROKER
    yield BROKER

    async def clean() -> None:
        client = Redis.from_url(BROKER, decode_responses=True)
        try:
            await delete_prefix(client, app.conf.anarchon_prefix)
        finally:
            await client.aclose()

    asyncio.run(clean())


def messages(app: Celery_) -> list[Any]:
    """The tasks beat sent, taken off the queue."""
    found = []
    with app.connection_for_read() as conn, conn.SimpleQueue(app.conf.task_default_queue) as q:
        while q.qsize():
            message = q.get(timeout=1)
            found.append(message.headers[SLOT_HEADER])
            message.ack()
    return found


def history(app: Celery_, job: str) -> list[RunRecord]:
    async def read() -> list[RunRecord]:
        async with anarchon.connect(
            app.conf.anarchon_store, prefix=app.conf.anarchon_prefix
        ) as store:
            return await store.history(job)

    return asyncio.run(read())


def test_a_slot_every_node_missed_is_sent_once_at_start(app: Celery_, any_store: str) -> None:
    """Beat's persistent semantics: an entry whose slot passed while no node ran is sent once
    when a node starts, if the slot is at most anarchon_max_late old; later nodes do not."""
    app.conf.anarchon_max_late = "2h"
    nodes = []
    for instance in ("node-a", "node-b"):
        app.conf.anarchon_instance = instance
        nodes.append(Scheduler(app=app))
    try:
        for node in nodes:
            node.tick()
        this_hour = time.time_ns() // 1_000_000 // HOUR_MS * HOUR_MS
        assert messages(app) == [this_hour]
        (run,) = history(app, "hourly")
        assert (run.slot, run.holder, run.status) == (this_hour, "node-a", RunStatus.SUCCEEDED)
        # Both are now waiting for the next hour.
        for node in nodes:
            assert 0 < node.tick() <= 3600
        assert messages(app) == []
    finally:
        for node in nodes:
            node.close()


def test_a_slot_older_than_max_late_is_not_sent_at_start(app: Celery_, any_store: str) -> None:
    app.conf.anarchon_max_late = 1
    wait_for(lambda: time.time() % 3600 > 1.5, 2, "a slot older than max_late")
    node = Scheduler(app=app)
    try:
        delay = node.tick()
        assert 0 < delay <= 3600 - 1.5
        assert messages(app) == []
        assert history(app, "hourly") == []
    finally:
        node.close()


@pytest.mark.slow  # ticks beat for 3 s against a store that never answers
def test_a_store_that_is_down_never_holds_beat_up(app: Celery_) -> None:
    """Claims retry in the store's thread (same token) until their slot turns late; beat's loop
    waits for an answer only `claim_wait_s`, and sends nothing it did not win."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]  # nothing listens there
    pytest.importorskip("anarchon_redis")
    app.conf.anarchon_store = f"redis://127.0.0.1:{port}/0"
    app.conf.anarchon_max_late = 30  # a beat loop that waited for the claim would stall 30 s
    app.conf.beat_schedule = {"second": {"task": "anarchon_test.second", "schedule": 1}}
    started = time.monotonic()
    node = Scheduler(app=app)
    try:
        assert time.monotonic() - started < 15
        deadline = time.monotonic() + 3
        while time.monotonic() < deadline:
            before = time.monotonic()
            delay = node.tick()
            assert time.monotonic() - before < 2.0
            wake = before + delay
            wait_for(lambda wake=wake: time.monotonic() > wake, delay + 1, "the next tick")
        assert messages(app) == []
    finally:
        closing = time.monotonic()
        node.close()
        assert time.monotonic() - closing < 10


class Sometimes(BaseSchedule):
    """A schedule kind the nodes cannot compute alike."""

    def is_due(self, last_run_at: datetime) -> Any:
        return schedstate(False, 60)


@pytest.mark.parametrize(
    ("settings", "expected"),
    [
        ({"anarchon_store": None}, "anarchon_store is not set"),
        ({"anarchon_store": "nosuch://host/"}, "anarchon_store: "),
        ({"anarchon_store": "memory://beat:s3cr3t@x/?nosuch=1"}, "unknown option nosuch"),
        ({"anarchon_max_late": "soon"}, "anarchon_max_late 'soon' is not a duration"),
        ({"anarchon_max_late": 0}, "anarchon_max_late"),
        ({"anarchon_max_late": float("nan")}, "finite number of seconds"),
        ({"anarchon_prefix": "my app"}, "anarchon_prefix 'my app' contains ' '"),
        ({"anarchon_instance": "a\nb"}, "anarchon_instance"),
        (
            {"anarchon_store": "amqp://beat:s3cr3t@127.0.0.1/", "anarchon_max_late": "10m"},
            "rule T3",
        ),
        (
            {"beat_schedule": {"sun": {"task": "t", "schedule": Sometimes()}}},
            "beat entry 'sun' has a Sometimes schedule",
        ),
        (
            {"beat_schedule": {"fast": {"task": "t", "schedule": 0.0001}}},
            "beat entry 'fast': its interval",
        ),
    ],
)
def test_bad_settings_stop_beat_with_a_clear_error(
    app: Celery_, settings: dict[str, Any], expected: str
) -> None:
    if "amqp" in str(settings.get("anarchon_store")):
        pytest.importorskip("anarchon_rabbitmq")
    app.conf.update(settings)
    with pytest.raises(ConfigError, match=re.escape(expected)) as raised:
        Scheduler(app=app)
    assert "s3cr3t" not in str(raised.value)


@pytest.mark.parametrize(
    ("value", "ms"),
    [(90, 90_000), (0.5, 500), ("90", 90_000), ("1m30s", 90_000), (timedelta(minutes=2), 120_000)],
)
def test_max_late_in_seconds_as_in_celery(value: object, ms: int) -> None:
    settings = read_settings({"anarchon_store": "memory://", "anarchon_max_late": value})
    assert settings.max_late_ms == ms


def test_celery_lazy_scheduler_reads_nothing_and_shows_its_store(app: Celery_) -> None:
    app.conf.anarchon_store = "redis://beat:s3cr3t@127.0.0.1:6379/0"
    scheduler = Scheduler(app=app, lazy=True)  # what `celery beat` builds for its banner
    assert "s3cr3t" not in scheduler.info
    assert "127.0.0.1:6379" in scheduler.info
    scheduler.close()


@pytest.mark.parametrize("zone", ["UTC", "Asia/Tokyo", "America/Sao_Paulo"])
@pytest.mark.parametrize(
    "fields",
    [
        {},
        {"minute": "*/15", "hour": "9-17", "day_of_week": "mon-fri"},
        {"minute": 0, "hour": 4},
        {"minute": 30, "hour": 2, "day_of_month": "1,15"},
    ],
)
def test_crontab_slots_are_the_instants_its_fields_match(
    app: Celery_, zone: str, fields: dict[str, Any]
) -> None:
    """An independent oracle: walk minute by minute in the app's zone (zones without DST in
    2025, so that wall times are unambiguous) and match the fields."""
    app.conf.timezone = zone
    cron = crontab(app=app, **fields)
    slots = slots_for("entry", cron)
    tz = ZoneInfo(zone)
    rng = random.Random(f"{zone}{fields}")
    start = datetime(2025, 1, 1, tzinfo=timezone.utc).timestamp() * 1000

    def matches(ms: int) -> bool:
        local = datetime.fromtimestamp(ms / 1000, tz)
        return (
            local.minute in cron.minute
            and local.hour in cron.hour
            and local.isoweekday() % 7 in cron.day_of_week
            and local.day in cron.day_of_month
            and local.month in cron.month_of_year
        )

    for _ in range(20):
        t = int(start + rng.random() * 360 * 86_400_000)
        expected = t // 60_000 * 60_000 + 60_000
        while not matches(expected):
            expected += 60_000
        assert slots.after(t) == expected, datetime.fromtimestamp(t / 1000, tz)
        assert slots.after(expected - 1) == expected
        assert slots.latest(expected + 59_999, since_ms=t) == expected
        assert slots.latest(expected - 1, since_ms=t + 1) is None


def test_interval_slots_are_multiples_of_the_period_since_the_epoch() -> None:
    """Nodes started at different times agree on every slot."""
    slots = slots_for("entry", schedule(timedelta(seconds=90)))
    assert slots.after(0) == 90_000
    assert slots.after(89_999) == 90_000
    assert slots.after(90_000) == 180_000
    assert slots.latest(100_000, since_ms=0) == 90_000
    assert slots.latest(100_000, since_ms=95_000) is None


def test_entry_names_become_job_names() -> None:
    assert job_name("every-second") == "every-second"
    cleanup = job_name("celery.backend_cleanup")
    assert re.fullmatch(r"celery-backend_cleanup-[0-9a-f]{8}", cleanup)
    names = {job_name(n) for n in ("a.b", "a b", "a-b", "é", "-", "x" * 300, "x" * 301)}
    assert len(names) == 7
    for name in names:
        assert check_name(name) == name
