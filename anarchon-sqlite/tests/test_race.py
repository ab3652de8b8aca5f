"""C1 across tasks, connections and OS processes on one SQLite file; concurrent first open."""

from __future__ import annotations

import asyncio
import sqlite3
import time
from pathlib import Path
from typing import Any

import pytest

from anarchon_sqlite import SQLiteStore, testing
from anarchon_test_support import finish, go, race_processes, race_spec, wait_ready, winners
from anarchon_test_support.race import Result, claim_in_order

SLOTS = 1000
PROCESSES = 4
TASKS_PER_PROCESS = 4
LOCAL_TASKS = 32
LOCAL_STORES = 4
HOUR_MS = 3_600_000
REQUEST = {"lease_ms": HOUR_MS, "max_late_ms": HOUR_MS, "overlap": "allow"}


def spec(path: Path, job: str, slots: list[int], tasks: int, **more: Any) -> dict[str, Any]:
    """The race worker's spec for a store on `path` (a long busy timeout: they all write)."""
    options = {"busy_timeout_ms": 60_000}
    return race_spec(
        f"sqlite:///{path}", slots, tasks, job=job, options=options, request=REQUEST, **more
    )


@pytest.mark.processes
async def test_C1_one_winner_per_slot_across_tasks_and_processes(tmp_path: Path) -> None:
    path = tmp_path / "race.db"
    stores = [SQLiteStore.create(path, busy_timeout_ms=60_000) for _ in range(LOCAL_STORES)]
    for store in stores:
        await store.open()
    first = await stores[0].now_ms() - 1000
    expected = [first + i * 1000 for i in range(SLOTS)]
    with race_processes(spec(path, "race", expected, TASKS_PER_PROCESS), PROCESSES) as procs:
        await asyncio.to_thread(wait_ready, procs)
        started = time.monotonic()
        go(procs)
        local = await asyncio.gather(
            *(
                claim_in_order(stores[t % LOCAL_STORES], "race", expected, f"local:{t}", **REQUEST)
                for t in range(LOCAL_TASKS)
            )
        )
        remote = await asyncio.to_thread(lambda: [finish(p) for p in procs])
    elapsed = time.monotonic() - started
    for store in stores:
        await store.close()

    results: list[Result] = [r for batch in [*local, *remote] for r in batch]
    others = [(slot, outcome) for slot, _, outcome, _ in results if outcome != "won"]
    assert all(outcome == "running" for _, outcome in others), others
    won = winners(results)
    doubles = {slot: tokens for slot, tokens in won.items() if len(tokens) > 1}
    assert not doubles, f"C1 broken: slots won more than once: {doubles}"
    missing = [slot for slot in expected if slot not in won]
    assert not missing, f"C4 broken: slots nobody won: {missing}"
    wrong = [
        slot
        for slot in expected
        if (run := testing.raw_run(path, "cron", "race", slot)) is None or run.token != won[slot][0]
    ]
    assert not wrong, f"the stored token is not the winner's for slots {wrong}"
    claims = SLOTS * (LOCAL_TASKS + PROCESSES * TASKS_PER_PROCESS)
    print(f"{claims} claims in {elapsed:.1f} s")


@pytest.mark.processes
async def test_eight_processes_open_one_new_file_at_once(tmp_path: Path) -> None:
    path = tmp_path / "fresh.db"
    first = int(time.time() * 1000)
    with race_processes(spec(path, "first", [first], 1, open_on_go=True), 8) as procs:
        await asyncio.to_thread(wait_ready, procs)
        go(procs)
        results = await asyncio.to_thread(lambda: [r for p in procs for r in finish(p)])
    assert len(winners(results).get(first, [])) == 1, results
    conn = sqlite3.connect(path)
    try:
        assert conn.execute("SELECT component, version FROM anarchon_schema").fetchall() == [
            ("sqlite", 1)
        ]
        assert conn.execute("PRAGMA journal_mode").fetchone() == ("wal",)
    finally:
        conn.close()
