"""C1 across OS processes on one PostgreSQL schema (8 processes x 1,000 slots); concurrent first
start of 8 instances on an empty schema."""

from __future__ import annotations

import asyncio
import time
from collections import defaultdict
from pathlib import Path

import psycopg
import pytest
from core_helpers import finish, go, wait_ready, worker_processes
from psycopg import sql

from anarchon_postgres import SCHEMA_VERSION, PostgresStore, testing

from .conftest import POSTGRES_URL, url_with

WORKER = Path(__file__).with_name("race_worker.py")
SLOTS = 1000
PROCESSES = 8
TASKS_PER_PROCESS = 2


@pytest.mark.processes
async def test_C1_eight_processes_race_for_1000_slots(schema: str) -> None:
    url = url_with(schema)
    store = PostgresStore.create(url)
    await store.open()
    first = await store.now_ms() - SLOTS * 1000 - 1000
    with worker_processes(WORKER, PROCESSES, url, "race", first, SLOTS, TASKS_PER_PROCESS) as procs:
        await asyncio.to_thread(wait_ready, procs)
        started = time.monotonic()
        go(procs)
        results = await asyncio.to_thread(lambda: [finish(p) for p in procs])
    elapsed = time.monotonic() - started
    await store.close()

    winners: dict[int, list[str]] = defaultdict(list)
    for result in results:
        for slot, token in result["won"]:  # type: ignore[attr-defined]
            winners[slot].append(token)
        outcomes = result["outcomes"]
        assert set(outcomes) <= {"won", "running"}, outcomes  # type: ignore[arg-type]
    expected = [first + i * 1000 for i in range(SLOTS)]
    doubles = {slot: tokens for slot, tokens in winners.items() if len(tokens) > 1}
    assert not doubles, f"C1 broken: slots won more than once: {doubles}"
    missing = [slot for slot in expected if slot not in winners]
    assert not missing, f"C4 broken: slots nobody won: {missing}"
    with psycopg.connect(POSTGRES_URL) as conn:
        rows = conn.execute(
            sql.SQL(
                "SELECT slot, token, attempt FROM {} WHERE prefix = 'cron' AND job = 'race'"
            ).format(sql.Identifier(schema, "anarchon_runs"))
        ).fetchall()
    stored = {slot: (token, attempt) for slot, token, attempt in rows}
    wrong = [s for s in expected if stored.get(s) != (winners[s][0], 1)]
    assert not wrong, f"the stored token is not the winner's for slots {wrong}"
    claims = SLOTS * PROCESSES * TASKS_PER_PROCESS
    print(f"{claims} claims in {elapsed:.1f} s")


@pytest.mark.processes
async def test_eight_instances_start_at_once_on_an_empty_schema(schema: str) -> None:
    url = url_with(schema)
    first = int(time.time() * 1000)
    with worker_processes(WORKER, 8, url, "first", first, 1, 1, "open-on-go") as procs:
        await asyncio.to_thread(wait_ready, procs)
        go(procs)
        results = await asyncio.to_thread(lambda: [finish(p) for p in procs])
    won = [r["won"] for r in results if r["won"]]
    assert len(won) == 1, results
    assert testing.raw_run(POSTGRES_URL, schema, "anarchon_runs", "cron", "first", first)
    with psycopg.connect(POSTGRES_URL) as conn:
        rows = conn.execute(
            sql.SQL("SELECT component, version FROM {}").format(
                sql.Identifier(schema, "anarchon_runs_schema")
            )
        ).fetchall()
    assert rows == [("postgres", SCHEMA_VERSION)]
