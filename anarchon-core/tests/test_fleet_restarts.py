"""A fleet of three scheduler processes through starts, restarts and crashes, on SQLite and Redis.

Each scenario runs five rounds, then checks the store's ledger against the fleet's own journal
(fleet_worker.py), as a Jepsen checker counts every operation: every secondly slot due while an
instance was up (from its start, less max_late for its catch-up, to its stop) has exactly one
record in `history` (succeeded, or skipped with its reason), the journal agrees with each record,
and no slot ran twice, except the next attempt of a run taken over after a SIGTERM or a kill -9,
which started only after the earlier attempt ended or was killed, with a larger fencing token.

The job: ``* * * * * *``, max_late 3 s, lease 3 s (5 s for the SIGTERM handover), heartbeat 0.5 s.
The fleet runs with its defaults (two contenders, one watcher) and a 0.5 s member refresh.
"""

from __future__ import annotations

import asyncio
import itertools
import json
import math
import os
import re
import select
import signal
import sqlite3
import subprocess
import sys
import time
import uuid
from collections import Counter, defaultdict
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

import anarchon
from anarchon import RunRecord, RunStatus

pytestmark = pytest.mark.processes

WORKER = Path(__file__).with_name("fleet_worker.py")
RELEASED = re.compile(r"run tick@(\d+) won while stopping")
REDIS_URL = os.environ.get("ANARCHON_TEST_REDIS_URL", "redis://127.0.0.1:6379/0")
ROUNDS = 5
MAX_LATE_S = 3
SETTLE_S = 0.3
"""A slot due this close before an instance is stopped may be left unclaimed by it."""
BACKLOG_MARGIN_S = 0.5
"""A starting instance decides the slots within max_late before now: those due up to this much
after ``up - max_late`` (claims take time, on a loaded machine too)."""
SKIP_KINDS = ("overlap:", "late:", "coalesced:")


class Fleet:
    """Worker processes sharing one store and one journal; every launch and kill is noted."""

    def __init__(self, tmp_path: Path, store: str, **config: Any) -> None:
        self.tmp = tmp_path
        self.journal = tmp_path / "journal.db"
        self.config = {
            "store": store,
            "journal": str(self.journal),
            "gate": str(tmp_path / "gate"),
            "lease": "3s",
            "heartbeat": "500ms",
            "max_late": f"{MAX_LATE_S}s",
            "grace": "500ms",
            "catch_up": "latest",
            # The fleet is on (contenders=2, one watcher): a killed member stays listed for
            # three refreshes, during which the slots it ranked first for wait for their
            # watcher's grace. Refreshing every 0.5 s keeps that window shorter than a round.
            "fleet_refresh": "500ms",
            "long_s": 60,
            **config,
        }
        self.procs: list[subprocess.Popen[str]] = []
        self.logs: list[Path] = []
        self.launched: list[float] = []
        self.killed: dict[int, float] = {}
        self.stopped: dict[int, float] = {}

    @property
    def live(self) -> list[subprocess.Popen[str]]:
        return [p for p in self.procs if p.poll() is None]

    def launch(self, count: int) -> list[subprocess.Popen[str]]:
        """Start `count` workers at once; return when each has started its scheduler."""
        started = []
        self.launched.append(time.time())
        for _ in range(count):
            log = self.tmp / f"worker-{len(self.procs)}.log"
            with log.open("w") as stderr:
                proc = subprocess.Popen(
                    [sys.executable, str(WORKER), json.dumps(self.config)],
                    stdout=subprocess.PIPE,
                    stderr=stderr,
                    text=True,
                )
            self.procs.append(proc)
            self.logs.append(log)
            started.append(proc)
        deadline = time.monotonic() + 20
        for proc in started:
            assert proc.stdout is not None
            left = deadline - time.monotonic()
            ready, _, _ = select.select([proc.stdout], [], [], max(left, 0))
            if not ready or proc.stdout.readline().strip() != "ready":
                self.fail(f"worker {proc.pid} did not start within 20 s")
        return started

    def terminate(self, procs: list[subprocess.Popen[str]]) -> float:
        """SIGTERM `procs` together, wait until they exited cleanly; return when it was sent."""
        sent = time.time()
        for proc in procs:
            self.stopped[proc.pid] = sent
            proc.send_signal(signal.SIGTERM)
        self.reap(procs)
        return sent

    def reap(self, procs: list[subprocess.Popen[str]]) -> None:
        """Wait until `procs`, sent SIGTERM, exited cleanly."""
        for proc in procs:
            try:
                code = proc.wait(15)
            except subprocess.TimeoutExpired:
                self.fail(f"worker {proc.pid} did not stop within 15 s of SIGTERM")
            assert code == 0, f"worker {proc.pid} exited {code}\n{self.tail()}"

    def kill(self, proc: subprocess.Popen[str]) -> None:
        self.killed[proc.pid] = time.time()
        proc.kill()
        proc.wait()

    def close(self) -> None:
        for proc in self.live:
            proc.kill()
            proc.wait()
        for proc in self.procs:
            if proc.stdout:
                proc.stdout.close()

    def rows(self, table: str, where: str = "1=1") -> list[tuple[Any, ...]]:
        db = sqlite3.connect(self.journal, timeout=30)
        try:
            return list(db.execute(f"SELECT * FROM {table} WHERE {where} ORDER BY at"))
        except sqlite3.OperationalError:  # no worker created the tables yet
            return []
        finally:
            db.close()

    def wait_for(self, condition: Callable[[], object], timeout: float, what: str) -> None:
        deadline = time.monotonic() + timeout
        while not condition():
            if time.monotonic() > deadline:
                self.fail(f"timed out after {timeout} s waiting for {what}")
            time.sleep(0.02)

    def wait_for_a_run_after(self, at: float) -> None:
        """Until a slot due after `at` ran to its end (the fleet is past its start-up)."""
        slot = math.ceil(at) * 1000
        self.wait_for(
            lambda: self.rows("runs", f"slot >= {slot} AND event = 'ok'"), 10, f"a run of {slot}+"
        )

    def wait_for_run(self, where: str, timeout: float, what: str) -> tuple[Any, ...]:
        """Until the journal has a run row matching `where`; return the first."""
        self.wait_for(lambda: self.rows("runs", where), timeout, what)
        return self.rows("runs", where)[0]

    def wait_until(self, at: float) -> None:
        self.wait_for(lambda: time.time() >= at, at - time.time() + 1, f"the clock to reach {at}")

    def wait_for_clock(self, low: float, high: float) -> None:
        """Until the wall clock's fraction of a second is in [low, high)."""
        self.wait_for(lambda: low <= time.time() % 1 < high, 2, f"a clock fraction {low}-{high}")

    def released_while_stopping(self) -> Counter[int]:
        """How many claims of each slot the workers' logs say were won while stopping and
        released unstarted."""
        found: Counter[int] = Counter()
        for log in self.logs:
            found.update(int(m) for m in RELEASED.findall(log.read_text()))
        return found

    def tail(self) -> str:
        return "\n".join(f"--- {p.name}\n{p.read_text()[-3000:]}" for p in self.logs[-6:])

    def fail(self, message: str) -> None:
        pytest.fail(f"{message}\n{self.tail()}")

    def history(self) -> list[RunRecord]:
        async def read() -> list[RunRecord]:
            async with anarchon.connect(self.config["store"]) as store:
                return await store.history("tick", 1000)

        return asyncio.run(read())


@pytest.fixture(params=["sqlite", pytest.param("redis", marks=pytest.mark.services)])
def store_url(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[str]:
    if request.param == "sqlite":
        pytest.importorskip("anarchon_sqlite")
        yield f"sqlite:///{tmp_path / 'store.db'}"
        return
    pytest.importorskip("anarchon_redis")
    import redis

    prefix = "fleet" + uuid.uuid4().hex[:12]
    client = redis.Redis.from_url(REDIS_URL)
    try:
        client.ping()
    except redis.ConnectionError:
        pytest.skip(f"no Redis at {REDIS_URL}: start it or set ANARCHON_TEST_REDIS_URL")
    yield f"{REDIS_URL}?prefix={prefix}"
    for key in client.scan_iter(match=f"{{{prefix}:*", count=500):
        client.delete(key)
    client.close()


@pytest.fixture
def fleet_on(tmp_path: Path, store_url: str) -> Iterator[Callable[..., Fleet]]:
    fleets: list[Fleet] = []

    def make(**config: Any) -> Fleet:
        fleets.append(Fleet(tmp_path, store_url, **config))
        return fleets[-1]

    yield make
    for fleet in fleets:
        fleet.close()


def due_slots(fleet: Fleet) -> list[int]:
    """The slots the fleet must decide: those due while an instance was up, from its start
    (minus max_late: its backlog) to its stop. A slot older than max_late when the first
    instance after a full stop came up is rightly not decided by anyone."""
    ends = {**fleet.stopped, **fleet.killed}
    due: set[int] = set()
    for pid, _, up in fleet.rows("life", "event = 'up'"):
        first = math.ceil(up - MAX_LATE_S + BACKLOG_MARGIN_S) * 1000
        due.update(range(first, math.floor(ends[pid] - SETTLE_S) * 1000 + 1, 1000))
    return sorted(due)


def check_ledger(fleet: Fleet, *, all_ran: bool = False) -> dict[int, RunRecord]:
    """Every slot due while the fleet was up has one record, succeeded or skipped with a reason;
    the journal agrees with it; no slot ran twice. Returns the ledger by slot."""
    records = fleet.history()
    ledger = {r.slot: r for r in records}
    assert len(ledger) == len(records), "history has two records of one slot"
    wanted = due_slots(fleet)
    assert wanted, "no slot fell in the window"
    holes = [s for s in wanted if s not in ledger]
    assert not holes, f"slots with no record (holes in the ledger): {holes}\n{fleet.tail()}"
    for slot in wanted:
        record = ledger[slot]
        if record.status is RunStatus.SKIPPED:
            assert record.error and record.error.startswith(SKIP_KINDS), record
            assert record.attempt == 0, record
        else:
            assert record.status is RunStatus.SUCCEEDED, record
        if all_ran:
            assert record.status is RunStatus.SUCCEEDED, f"catch_up 'all' did not run {record}"

    attempts: dict[int, list[tuple[Any, ...]]] = defaultdict(list)
    ends: dict[tuple[int, int], float] = {}
    for slot, attempt, fence, token, pid, event, at in fleet.rows("runs"):
        if event == "start":
            attempts[slot].append((attempt, fence, token, pid, at))
        else:
            ends[(slot, attempt)] = at
    released = fleet.released_while_stopping()
    for slot, started in attempts.items():
        numbers = [a[0] for a in started]
        # An attempt won by an instance already stopping is released unstarted (L9); its backup
        # is the next attempt. Any other attempt that never started was lost.
        first = 1 + released[slot]
        assert numbers[0] == first, (
            f"slot {slot}: attempt {first} never started (won by an instance that neither ran "
            f"nor released it?), the journal shows attempts {numbers}, {released[slot]} "
            f"released while stopping\n{fleet.tail()}"
        )
        assert numbers == list(range(first, first + len(started))), (
            f"slot {slot} ran attempts {numbers}"
        )
        for before, after in itertools.pairwise(started):
            # A takeover is the next attempt of the same slot, never a second run beside the first.
            end = ends.get((slot, before[0]), fleet.killed.get(before[3]))
            assert end is not None and end <= after[4], (
                f"slot {slot}: attempt {after[0]} started at {after[4]:.3f} before attempt "
                f"{before[0]} ended (at {end})"
            )
            assert after[1] > before[1], f"slot {slot}: the fencing token did not grow"
        found = ledger.get(slot)
        assert found is not None, f"slot {slot} ran but has no record"
        last = started[-1]
        assert found.status is RunStatus.SUCCEEDED, f"slot {slot} ran, yet {found}"
        assert (found.attempt, found.token, found.holder) == (
            last[0],
            last[2],
            f"pid-{last[3]}",
        ), f"slot {slot}: the record is not the last attempt the journal shows"
    never_ran = [
        s for s, r in ledger.items() if r.status is RunStatus.SUCCEEDED and s not in attempts
    ]
    assert not never_ran, f"recorded succeeded, never ran by the journal: {never_ran}"
    return ledger


def retried(fleet: Fleet) -> set[int]:
    return {slot for slot, *_ in fleet.rows("runs", "attempt > 1")}


def retried_unasked(fleet: Fleet) -> dict[int, list[tuple[Any, ...]]]:
    """The retried slots that no stop handed over (L9), with their journal rows. A stop hands a
    slot over when the stopping instance won it and released it unstarted, or when its run
    outlived the grace period and was cancelled (a run of a few milliseconds can, when the
    loaded machine stalls the journal's insert)."""
    released = fleet.released_while_stopping()
    cancelled = {
        slot
        for slot, _, _, _, pid, _, _ in fleet.rows("runs", "event = 'cancelled'")
        if pid in fleet.stopped
    }
    return {
        slot: fleet.rows("runs", f"slot = {slot}")
        for slot in retried(fleet)
        if not released[slot] and slot not in cancelled
    }


@pytest.mark.parametrize("catch_up", ["all"])
def test_T6_all_instances_started_at_once(fleet_on: Callable[..., Fleet], catch_up: str) -> None:
    fleet = fleet_on(catch_up=catch_up)
    for _ in range(ROUNDS):
        procs = fleet.launch(3)
        fleet.wait_for_a_run_after(fleet.rows("life", "event = 'up'")[-1][2] + 1)
        fleet.terminate(procs)
    check_ledger(fleet, all_ran=True)
    assert not retried_unasked(fleet)
    winners = {pid for *_, pid, event, _ in fleet.rows("runs") if event == "start"}
    assert len(winners) >= 2, "one process won every slot: no race was exercised"


@pytest.mark.parametrize("catch_up", ["all", "latest"])
def test_T6_all_restarted_at_once_across_a_slot_boundary(
    fleet_on: Callable[..., Fleet], catch_up: str
) -> None:
    fleet = fleet_on(catch_up=catch_up)
    procs = fleet.launch(3)
    fleet.wait_for_a_run_after(time.time())
    down: list[tuple[float, float]] = []
    for _ in range(ROUNDS):
        # Stopped late in a second, started again after the next boundary (for 'latest', late
        # enough that the restart usually misses two slots: it runs the newer one only).
        fleet.wait_for_clock(0.6, 0.8)
        stopped = fleet.terminate(procs)
        fleet.wait_until(math.ceil(stopped) + (0.6 if catch_up == "latest" else 0.05))
        procs = fleet.launch(3)
        up = fleet.rows("life", "event = 'up'")[-3][2]
        down.append((stopped, up))
        fleet.wait_for_a_run_after(up)
    fleet.terminate(procs)
    ledger = check_ledger(fleet, all_ran=catch_up == "all")
    assert not retried_unasked(fleet)
    if catch_up == "latest":
        check_coalesced(fleet, ledger, down)


def check_coalesced(
    fleet: Fleet, ledger: dict[int, RunRecord], down: list[tuple[float, float]]
) -> None:
    """catch_up 'latest': of the slots a full restart missed, all but the newest are recorded
    coalesced, each naming a newer slot that ran (or was coalesced in turn into one that ran)."""
    due = set(due_slots(fleet))
    for stopped, up in down:
        slots = range(math.ceil(stopped) * 1000, math.floor(up) * 1000 + 1, 1000)
        missed = [s for s in slots if s in due]
        for slot in missed[:-1]:
            assert (ledger[slot].error or "").startswith("coalesced:"), ledger[slot]
    skipped = [r for r in ledger.values() if r.status is RunStatus.SKIPPED]
    assert any(r.error.startswith("coalesced:") for r in skipped if r.error), "none coalesced"
    for record in skipped:
        if (record.error or "").startswith("late:"):
            # A restart slower than max_late (a loaded machine): rightly late, not coalesced.
            assert record.finished_at is not None
            assert record.finished_at - record.slot > MAX_LATE_S * 1000, record
            continue
        assert (record.error or "").startswith("coalesced: slot "), f"not coalesced: {record}"
        newer = record
        while newer.status is RunStatus.SKIPPED:
            named = int((newer.error or "").split()[2])
            assert named > newer.slot, f"{newer} names an older slot"
            newer = ledger[named]
        assert newer.status is RunStatus.SUCCEEDED, f"{record} was coalesced into {newer}"


def test_T6_rolling_restart(fleet_on: Callable[..., Fleet]) -> None:
    fleet = fleet_on()
    procs = fleet.launch(3)
    fleet.wait_for_a_run_after(time.time())
    for _ in range(ROUNDS):
        for i in range(3):
            fleet.terminate([procs[i]])
            procs[i] = fleet.launch(1)[0]
    # The fleet's first start coalesces the slots due before it (catch_up 'latest').
    start = fleet.rows("life", "event = 'up'")[0][2] * 1000
    fleet.terminate(procs)
    ledger = check_ledger(fleet)
    assert not retried_unasked(fleet)
    skipped = [r for s, r in ledger.items() if s >= start and r.status is not RunStatus.SUCCEEDED]
    assert not skipped, "a rolling restart keeps two instances up: no slot is missed"


def gate_a_long_run(fleet: Fleet) -> tuple[int, int]:
    """Make the run of the slot two seconds on long; return the slot and the pid running it."""
    slot = (int(time.time()) + 2) * 1000
    Path(fleet.config["gate"]).write_text(str(slot))
    where = f"slot = {slot} AND attempt = 1 AND event = 'start'"
    return slot, fleet.wait_for_run(where, 10, f"the long run of {slot}")[4]


def test_L9_sigterm_of_the_instance_running_a_long_job_hands_it_over(
    fleet_on: Callable[..., Fleet],
) -> None:
    fleet = fleet_on(lease="5s", grace="500ms", heartbeat="500ms")
    procs = fleet.launch(3)
    fleet.wait_for_a_run_after(time.time())
    for _ in range(ROUNDS):
        slot, winner = gate_a_long_run(fleet)
        proc = next(p for p in procs if p.pid == winner)
        sent = fleet.stopped[winner] = time.time()
        proc.send_signal(signal.SIGTERM)
        where = f"slot = {slot} AND attempt = 2 AND event = 'ok'"
        _, _, _, _, pid, _, at = fleet.wait_for_run(where, 10, "the backup's attempt 2")
        assert pid != winner
        # Released at the end of the grace period (0.5 s), seen by a backup's next check (every
        # heartbeat, 0.5 s): well before the 5 s lease would have run out.
        assert at - sent < 2.5, f"the handover took {at - sent:.2f} s"
        fleet.reap([proc])
        procs[procs.index(proc)] = fleet.launch(1)[0]
    fleet.terminate(procs)
    ledger = check_ledger(fleet)
    assert len(retried(fleet)) == ROUNDS
    assert all(ledger[s].attempt == 2 for s in retried(fleet))


def test_L4_kill_9_of_a_winner_a_backup_takes_over_after_the_lease(
    fleet_on: Callable[..., Fleet],
) -> None:
    fleet = fleet_on(lease="3s", heartbeat="500ms")
    procs = fleet.launch(3)
    fleet.wait_for_a_run_after(time.time())
    for _ in range(ROUNDS):
        slot, winner = gate_a_long_run(fleet)
        proc = next(p for p in procs if p.pid == winner)
        fleet.kill(proc)
        where = f"slot = {slot} AND attempt = 2 AND event = 'start'"
        took = fleet.wait_for_run(where, 10, "the backup's attempt 2")[6] - fleet.killed[winner]
        # The lease was renewed at most a heartbeat before the kill and lasts 3 s; backups
        # check every heartbeat.
        assert 3 - 0.5 - 0.1 <= took <= 3 + 0.5 + 1.0, f"the takeover took {took:.2f} s"
        procs[procs.index(proc)] = fleet.launch(1)[0]
    fleet.terminate(procs)
    ledger = check_ledger(fleet)
    assert len(retried(fleet)) == ROUNDS
    overlapped = [r for r in ledger.values() if (r.error or "").startswith("overlap:")]
    assert overlapped, "no slot was skipped while the killed winner's lease was live"
