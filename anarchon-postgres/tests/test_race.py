"""C1 across OS processes on one PostgreSQL schema (8 processes x 1,000 slots); concurrent first
start of 8 instances on an empty schema."""

from __future__ import annotations

import asyncio
import time
from typing import Any

import psycopg
import pytest
from psycopg import sql

from anarchon_postgres import SCHEMA_VERSION, PostgresStore, testing
from anarchon_test_support import finish, go, race_processes, race_spec, wait_ready, winners

from .conftest import POSTGRES_URL, url_with

SLOTS = 1000
PROCESSES = 8
TASKS_PER_PROCESS = 2
HOUR_MS = 3_600_000


def spec(url: str, job: str, slots: list[int], tasks: int, **more: Any) -> dict[str, Any]:
    """The race worker's spec: a pool as large as the worker's tasks."""
    request = {"lease_ms": HOUR_MS, "max_late_ms": HOUR_MS, "overlap": "allow"}
    options = {"pool_max_size": tasks}
    return race_spec(url, slots, tasks, job=job, options=options, request=request, **more)


@pytest.mark.processes
async def test_C1_eight_processes_race_for_1000_slots(schema: str) -> None:
    url = url_with(schema)
    store = PostgresStore.create(url)
    await store.open()
    first = await store.now_ms() - SLOTS * 1000 - 1000
    expected = [first + i * 1000 for i in range(SLOTS)]
    with race_processes(spec(url, "race", expected, TASKS_PER_PROCESS), PROCESSES) as procs:
        await asyncio.to_thread(wait_ready, procs)
        started = time.monotonic()
        go(procs)
        results = await asyncio.to_thread(lambda: [r for p in procs for r in finish(p)])
    elapsed = time.monotonic() - started
    await store.close()

    outcomes = {outcome for _, _, outcome, _ in results}
    assert outcomes <= {"won", "running"}, outcomes
    won = winners(results)
    doubles = {slot: tokens for slot, tokens in won.items() if len(tokens) > 1}
    assert not doubles, f"C1 broken: slots won more than once: {doubles}"
    missing = [slot for slot in expected if slot not in won]
    assert not missing, f"C4 broken: slots nobody won: {missing}"
    with psycopg.connect(POSTGRES_URL) as conn:
        rows = conn.execute(
            sql.SQL(
                "SELECT slot, token, attempt FROM {} WHERE prefix = 'cron' AND job = 'race'"
            ).format(sql.Identifier(schema, "anarchon_runs"))
        ).fetchall()
    stored = {slot: (token, attempt) for slot, token, attempt in rows}
    wrong = [s for s in expected if stored.get(s) != (won[s][0], 1)]
    assert not wrong, f"the stored token is not the winner's for slots {wrong}"
    claims = SLOTS * PROCESSES * TASKS_PER_PROCESS
    print(f"{claims} claims in {elapsed:.1f} s")


@pytest.mark.processes
async def test_eight_instances_start_at_once_on_an_empty_schema(schema: str) -> None:
    url = url_with(schema)
    first = int(time.time() * 1000)
    with race_processes(spec(url, "first", [first], 1, open_on_go=True), 8) as procs:
        await asyncio.to_thread(wait_ready, procs)
        go(procs)
        results = await asyncio.to_thread(lambda: [r for p in procs for r in finish(p)])
    assert len(winners(results).get(first, [])) == 1, results
    assert testing.raw_run(POSTGRES_URL, schema, "anarchon_runs", "cron", "first", first)
    with psycopg.connect(POSTGRES_URL) as conn:
        rows = conn.execute(
            sql.SQL("SELECT component, version FROM {}").format(
                sql.Identifier(schema, "anarchon_runs_schema")
            )
        ).fetchall()
    assert rows == [("postgres", SCHEMA_VERSION)]
