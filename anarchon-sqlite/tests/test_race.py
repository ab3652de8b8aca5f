"""C1 across tasks, connections and OS processes on one SQLite file; concurrent first open."""

from __future__ import annotations

import asyncio
import sqlite3
import time
from collections import defaultdict
from pathlib import Path

import pytest
from core_helpers import finish, go, wait_ready, worker_processes

from anarchon_sqlite import SQLiteStore, testing

from .race_worker import claim_all

WORKER = Path(__file__).with_name("race_worker.py")
SLOTS = 1000
PROCESSES = 4
TASKS_PER_PROCESS = 4
LOCAL_TASKS = 32
LOCAL_STORES = 4


@pytest.mark.processes
async def test_C1_one_winner_per_slot_across_tasks_and_processes(tmp_path: Path) -> None:
    path = tmp_path / "race.db"
    stores = [SQLiteStore.create(path, busy_timeout_ms=60_000) for _ in range(LOCAL_STORES)]
    for store in stores:
        await store.open()
    first = await stores[0].now_ms() - 1000
    with worker_processes(
        WORKER, PROCESSES, path, "race", first, SLOTS, TASKS_PER_PROCESS
    ) as procs:
        await asyncio.to_thread(wait_ready, procs)
        started = time.monotonic()
        go(procs)
        local = await asyncio.gather(
            *(
                claim_all(stores[t % LOCAL_STORES], "race", first, SLOTS, f"local-{t}")
                for t in range(LOCAL_TASKS)
            )
        )
        remote = await asyncio.to_thread(lambda: [finish(p) for p in procs])
    elapsed = time.monotonic() - started
    for store in stores:
        await store.close()

    winners: dict[int, list[str]] = defaultdict(list)
    for batch in local:
        for slot, outcome, token in batch:
            if outcome == "won":
                winners[slot].append(token)
            else:
                assert outcome == "running", (slot, outcome)
    for result in remote:
        for slot, token in result["won"]:  # type: ignore[attr-defined]
            winners[slot].append(token)
    expected = [first + i * 1000 for i in range(SLOTS)]
    doubles = {slot: tokens for slot, tokens in winners.items() if len(tokens) > 1}
    assert not doubles, f"C1 broken: slots won more than once: {doubles}"
    missing = [slot for slot in expected if slot not in winners]
    assert not missing, f"C4 broken: slots nobody won: {missing}"
    wrong = [
        slot
        for slot in expected
        if (run := testing.raw_run(path, "cron", "race", slot)) is None
        or run.token != winners[slot][0]
    ]
    assert not wrong, f"the stored token is not the winner's for slots {wrong}"
    claims = SLOTS * (LOCAL_TASKS + PROCESSES * TASKS_PER_PROCESS)
    print(f"{claims} claims in {elapsed:.1f} s")


@pytest.mark.processes
async def test_eight_processes_open_one_new_file_at_once(tmp_path: Path) -> None:
    path = tmp_path / "fresh.db"
    first = int(time.time() * 1000)
    with worker_processes(WORKER, 8, path, "first", first, 1, 1, "open-on-go") as procs:
        await asyncio.to_thread(wait_ready, procs)
        go(procs)
        results = await asyncio.to_thread(lambda: [finish(p) for p in procs])
    won = [r["won"] for r in results if r["won"]]
    assert len(won) == 1, results
    conn = sqlite3.connect(path)
    try:
        assert conn.execute("SELECT component, version FROM anarchon_schema").fetchall() == [
            ("sqlite", 1)
        ]
        assert conn.execute("PRAGMA journal_mode").fetchone() == ("wal",)
    finally:
        conn.close()
