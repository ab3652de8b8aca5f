"""Pause and trigger on a SQLite file (P1, X1): the store's own calls on the manual clock, a
file from before the control tables, and P1 under a race of processes."""

from __future__ import annotations

import asyncio
import sqlite3
from collections.abc import AsyncIterator
from pathlib import Path

import pytest

from anarchon import (
    ClaimRequest,
    ConfigError,
    Outcome,
    RunStatus,
    SupportsPause,
    SupportsTrigger,
    new_token,
)
from anarchon.backend import is_triggered_slot
from anarchon_sqlite import SQLiteStore, testing
from anarchon_test_support import T0, ManualClock, finish, go, race_processes, wait_ready
from anarchon_test_support.race import race_spec

SLOT = T0 + 60_000
HOUR_MS = 3_600_000


def request(job: str = "report", slot: int = SLOT, **more: object) -> ClaimRequest:
    fields: dict[str, object] = {"lease_ms": 60_000, "max_late_ms": HOUR_MS, **more}
    return ClaimRequest(job=job, slot=slot, token=new_token(), instance="host:1:abcd", **fields)  # type: ignore[arg-type]


@pytest.fixture
def clock() -> ManualClock:
    return ManualClock(SLOT)


@pytest.fixture
async def store(tmp_path: Path, clock: ManualClock) -> AsyncIterator[SQLiteStore]:
    store = SQLiteStore.create(tmp_path / "anarchon.db", clock=clock)
    await store.open()
    yield store
    await store.close()


async def test_sqlite_says_it_pauses_and_triggers(store: SQLiteStore) -> None:
    assert store.capabilities.pause and store.capabilities.trigger
    assert isinstance(store, SupportsPause) and isinstance(store, SupportsTrigger)


async def test_P1_a_paused_job_s_new_slot_is_recorded_skipped_with_the_reason(
    store: SQLiteStore,
) -> None:
    pause = await store.pause("report", reason="deploy freeze", by="ops@host")
    assert (pause.job, pause.since_ms, pause.until_ms) == ("report", SLOT, None)
    first = request()
    claim = await store.claim(first)
    assert claim.outcome is Outcome.SKIPPED
    assert claim.reason == "paused: deploy freeze" and claim.skip_kind == "paused"
    run = testing.raw_run(store.path, "cron", "report", SLOT)
    assert run is not None and run.status is RunStatus.SKIPPED
    assert (run.error, run.token, run.attempt) == ("paused: deploy freeze", first.token, 0)
    again = await store.claim(request())  # later claims read the record
    assert again.outcome is Outcome.SKIPPED and again.token == first.token
    # Other jobs and other prefixes are not paused.
    assert (await store.claim(request("other"))).won


async def test_P1_without_a_reason_the_skip_says_paused(store: SQLiteStore) -> None:
    await store.pause("report")
    assert (await store.claim(request())).reason == "paused"


async def test_P1_claim_many_keeps_the_pause(store: SQLiteStore) -> None:
    await store.pause("b")
    claims = await store.claim_many([request("a"), request("b"), request("c")])
    assert [c.outcome for c in claims] == [Outcome.WON, Outcome.SKIPPED, Outcome.WON]


async def test_P1_runs_made_before_the_pause_go_on(store: SQLiteStore, clock: ManualClock) -> None:
    first = request(attempts=3)
    assert (await store.claim(first)).won
    await store.pause("report")
    assert await store.renew("report", SLOT, first.token, 60_000)
    testing.force_expire(store.path, "cron", "report", SLOT, now_ms=clock())
    takeover = await store.claim(request(attempts=3))  # L4 goes on under a pause
    assert takeover.won and takeover.attempt == 2
    assert await store.finish("report", SLOT, takeover.token, RunStatus.SUCCEEDED)


async def test_P1_a_late_slot_of_a_paused_job_is_recorded_late(
    store: SQLiteStore, clock: ManualClock
) -> None:
    await store.pause("report")
    clock.advance(HOUR_MS + 1)
    claim = await store.claim(request())
    assert claim.outcome is Outcome.SKIPPED and claim.skip_kind == "late"


async def test_P1_resume_and_until_end_the_pause(store: SQLiteStore, clock: ManualClock) -> None:
    ended = await store.pause("report", until_ms=SLOT - 1)  # over already: holds nothing
    assert ended.until_ms == SLOT - 1 and await store.pauses() == []
    assert (await store.claim(request(slot=SLOT - 1000, overlap="allow"))).won
    await store.pause("report", until_ms=SLOT + 5000)
    assert [p.job for p in await store.pauses()] == ["report"]
    assert (await store.claim(request(slot=SLOT - 2000))).outcome is Outcome.SKIPPED
    clock.advance(5000)  # until_ms is exclusive: the pause has ended
    assert await store.pauses() == []
    assert (await store.claim(request(overlap="allow"))).won
    assert await store.resume("report") is False  # ended by itself: it was not paused
    await store.pause("report")
    assert await store.resume("report") is True
    assert await store.resume("report") is False
    assert (await store.claim(request(slot=SLOT + 1000, overlap="allow"))).won


async def test_a_pause_replaces_the_job_s_pause_and_pauses_are_sorted(
    store: SQLiteStore, clock: ManualClock
) -> None:
    await store.pause("zeta", reason="first")
    clock.advance(10)
    await store.pause("alpha")
    await store.pause("zeta", reason="second", by="me", until_ms=SLOT + HOUR_MS)
    pauses = await store.pauses()
    assert [(p.job, p.since_ms, p.until_ms, p.reason, p.by) for p in pauses] == [
        ("alpha", SLOT + 10, None, "", ""),
        ("zeta", SLOT + 10, SLOT + HOUR_MS, "second", "me"),
    ]
    other = SQLiteStore.create(store.path, clock=clock, prefix="other")
    await other.open()
    try:
        assert await other.pauses() == []  # prefixes do not see each other's pauses
        assert (await other.claim(request("zeta"))).won
    finally:
        await other.close()


@pytest.mark.parametrize(
    ("kwargs", "words"),
    [
        ({"reason": "two\nlines"}, "reason must be printable"),
        ({"reason": "x" * 201}, "at most 200"),
        ({"by": 7}, "by must be printable"),
        ({"until_ms": "tomorrow"}, "until_ms must be None"),
    ],
)
async def test_bad_pause_input_is_refused_with_what_to_do(
    store: SQLiteStore, kwargs: dict[str, object], words: str
) -> None:
    with pytest.raises(ConfigError, match=words):
        await store.pause("report", **kwargs)  # type: ignore[arg-type]
    assert await store.pauses() == []
    with pytest.raises(ConfigError, match="job name"):
        await store.pause("no spaces")


async def test_X1_triggers_get_distinct_slots_off_whole_seconds(
    store: SQLiteStore, clock: ManualClock
) -> None:
    assert clock() % 1000 == 0
    first = await store.trigger("report", reason="backfill", by="ops")
    second = await store.trigger("report")
    other = await store.trigger("other")
    assert (first.slot, second.slot, other.slot) == (SLOT + 1, SLOT + 2, SLOT + 1)
    assert first.requested_at == SLOT and first.reason == "backfill" and first.by == "ops"
    clock.advance(1)  # now is the first trigger's slot: the next one moves past both
    assert (await store.trigger("report")).slot == SLOT + 3
    clock.advance(998)  # SLOT + 999; then a whole second is skipped
    assert [(await store.trigger("x")).slot for _ in range(2)] == [SLOT + 999, SLOT + 1001]
    assert all(is_triggered_slot(t.slot) for t in await store.triggers(0))
    # The triggered slot is claimed like any slot: one winner.
    assert (await store.claim(request(slot=first.slot))).won
    assert (await store.claim(request(slot=first.slot))).outcome is Outcome.RUNNING


async def test_X1_triggers_are_listed_oldest_first_and_kept_a_day(
    store: SQLiteStore, clock: ManualClock
) -> None:
    await store.trigger("b")
    clock.advance(100)
    await store.trigger("a")
    assert [t.job for t in await store.triggers(0)] == ["b", "a"]
    assert [t.job for t in await store.triggers(SLOT + 100)] == ["a"]
    clock.advance(86_400_000)  # the first is now older than a day: the next trigger drops it
    await store.trigger("c")
    assert [t.job for t in await store.triggers(0)] == ["a", "c"]
    with pytest.raises(ConfigError, match="since_ms"):
        await store.triggers("yesterday")  # type: ignore[arg-type]


def _tables(path: Path) -> set[str]:
    conn = sqlite3.connect(path)
    try:
        return {str(r[0]) for r in conn.execute("SELECT name FROM sqlite_master")}
    finally:
        conn.close()


async def _as_an_older_release_left_it(path: Path) -> None:
    store = SQLiteStore.create(path)
    await store.open()
    assert (await store.claim(request(slot=T0))).won
    await store.close()
    conn = sqlite3.connect(path)
    try:
        conn.execute("DROP TABLE anarchon_pauses")
        conn.execute("DROP TABLE anarchon_triggers")
    finally:
        conn.close()


async def test_a_file_from_before_pauses_is_read_only_without_them_and_gets_them_on_open(
    tmp_path: Path,
) -> None:
    path = tmp_path / "old.db"
    await _as_an_older_release_left_it(path)
    reader = SQLiteStore.create(path)
    await reader.open_read_only()
    try:
        assert await reader.pauses() == [] and await reader.triggers(0) == []
        assert len(await reader.history("report")) == 1
        with pytest.raises(ConfigError, match="read-only"):
            await reader.pause("report")
    finally:
        await reader.close()
    assert "anarchon_pauses" not in _tables(path)  # R1: nothing created

    store = SQLiteStore.create(path)
    await store.open()
    try:
        assert {"anarchon_pauses", "anarchon_triggers"} <= _tables(path)
        await store.pause("report")
        await store.trigger("report")
    finally:
        await store.close()
    reader = SQLiteStore.create(path)
    await reader.open_read_only()
    try:
        assert [p.job for p in await reader.pauses()] == ["report"]
        assert [t.job for t in await reader.triggers(0)] == ["report"]
    finally:
        await reader.close()


async def test_a_changed_control_table_is_corrupt(tmp_path: Path) -> None:
    path = tmp_path / "changed.db"
    await _as_an_older_release_left_it(path)
    conn = sqlite3.connect(path)
    try:
        conn.execute("CREATE TABLE anarchon_pauses (prefix TEXT, job TEXT, note TEXT)")
    finally:
        conn.close()
    from anarchon import StoreCorrupt

    store = SQLiteStore.create(path)
    with pytest.raises(StoreCorrupt, match="anarchon_pauses"):
        await store.open()
    await store.close()


async def test_a_damaged_pause_row_is_named(store: SQLiteStore) -> None:
    from anarchon import StoreCorrupt

    await store.pause("report")
    conn = sqlite3.connect(store.path)
    try:
        conn.execute("UPDATE anarchon_pauses SET since_ms = 'soon'")
        conn.commit()
    finally:
        conn.close()
    with pytest.raises(StoreCorrupt, match="anarchon_pauses"):
        await store.pauses()


@pytest.mark.processes
async def test_P1_processes_racing_for_a_paused_job_s_slot_none_wins_one_skip_record(
    tmp_path: Path,
) -> None:
    path = tmp_path / "race.db"
    store = SQLiteStore.create(path, busy_timeout_ms=60_000)
    await store.open()
    now = await store.now_ms()
    slots = [now - now % 1000 - i * 1000 for i in range(20)]
    await store.pause("race", reason="frozen")
    spec = race_spec(
        f"sqlite:///{path}",
        slots,
        4,
        job="race",
        options={"busy_timeout_ms": 60_000},
        request={"lease_ms": HOUR_MS, "max_late_ms": HOUR_MS, "overlap": "allow"},
        together=True,
    )
    try:
        with race_processes(spec, 4) as procs:
            await asyncio.to_thread(wait_ready, procs)
            go(procs)
            results = await asyncio.to_thread(lambda: [r for p in procs for r in finish(p)])
        assert len(results) == 4 * 4 * len(slots)
        assert {outcome for _, _, outcome, _ in results} == {"skipped"}, results[:5]
        assert {reason for _, _, _, reason in results} == {"paused: frozen"}
        for slot in slots:
            run = testing.raw_run(path, "cron", "race", slot)
            assert run is not None and run.status is RunStatus.SKIPPED, (slot, run)
            # One record: every answer names the token of the claim that wrote it.
            tokens = {token for s, token, _, _ in results if s == slot}
            assert run.token in tokens
        history = await store.history("race", 100)
        assert sorted(r.slot for r in history) == sorted(slots)
    finally:
        await store.close()
