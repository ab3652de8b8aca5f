"""Peers on the same stores, in the same run: each timed interleaved with anarchon's won and lost
claims on the same server, and reported as a ratio to anarchon's claim (> 1: the peer is slower).

* Redis: redis-py's ``Lock`` (``SET NX PX`` + the release script), acquired and released when free
  (vs a won claim), and a non-blocking acquire of a held lock (vs a lost claim).
* PostgreSQL: ``BEGIN; SELECT pg_try_advisory_xact_lock(k); COMMIT``; ShedLock's lock statement
  ``UPDATE shedlock SET lock_until = ... WHERE name = ? AND lock_until <= now()`` on a free lock
  and on a held one; APScheduler 4's ``SQLAlchemyDataStore.acquire_schedules`` of one due schedule
  (the same scheduler id each time: it re-acquires its own) and by another scheduler while the
  lease is held (nothing acquired).
"""

from __future__ import annotations

import logging
import time
import uuid
from collections.abc import Awaitable, Callable, Mapping
from contextlib import AsyncExitStack
from datetime import datetime, timedelta, timezone
from typing import Any

from ._stats import median, p99, ratio, summarize
from ._targets import Target

__all__ = ["APSCHEDULER_PIN", "measure_peers"]

APSCHEDULER_PIN = "4.0.0a6"

Op = Callable[[], Awaitable[None]]


async def _interleave(target: Target, ops: Mapping[str, Op], n: int) -> dict[str, list[float]]:
    """anarchon's won and lost claims and every peer operation, one of each per iteration."""

    async def won() -> None:
        await target.win(target.win_request())

    calls: dict[str, Op] = {"anarchon won": won, "anarchon lost": target.lose, **ops}
    times: dict[str, list[float]] = {name: [] for name in calls}
    for i in range(-30, n):
        for name, call in calls.items():
            started = time.perf_counter()
            await call()
            if i >= 0:
                times[name].append(time.perf_counter() - started)
    return times


def _rows(
    store: str, times: dict[str, list[float]], kinds: dict[str, str], extra: dict[str, str]
) -> list[dict[str, Any]]:
    rows = []
    for name, kind in kinds.items():
        mine = times[f"anarchon {kind}"]
        rows.append(
            {
                "store": store,
                "peer": name,
                "compared_to": f"anarchon {kind}",
                **summarize(times[name]),
                "anarchon_median_us": median(mine) * 1e6,
                "median_ratio": ratio(median(times[name]), median(mine)),
                "p99_ratio": ratio(p99(times[name]), p99(mine)),
                "note": extra.get(name, ""),
            }
        )
    return rows


async def redis_peers(target: Target, n: int) -> list[dict[str, Any]]:
    client = target.store.client
    key = f"bench-lock-{uuid.uuid4().hex[:8]}"
    free = client.lock(f"{key}-free", timeout=60)
    holder = client.lock(f"{key}-held", timeout=600)
    assert await holder.acquire(blocking=False)
    other = client.lock(f"{key}-held", timeout=600)

    async def lock_free() -> None:
        assert await free.acquire(blocking=False)
        await free.release()

    async def lock_held() -> None:
        assert not await other.acquire(blocking=False)

    ops = {"redis-py Lock acquire+release": lock_free, "redis-py Lock acquire (held)": lock_held}
    try:
        times = await _interleave(target, ops, n)
    finally:
        await holder.release()
    kinds = {"redis-py Lock acquire+release": "won", "redis-py Lock acquire (held)": "lost"}
    return _rows(target.name, times, kinds, {})


async def postgres_peers(target: Target, n: int) -> tuple[list[dict[str, Any]], str | None]:
    from psycopg import sql

    schema: str = target.schema  # type: ignore[attr-defined]
    pool = target.store._db.pool  # the store's pool (anarchon_postgres._connection)
    shedlock = sql.Identifier(schema, "shedlock")
    async with pool.connection() as conn:
        # ShedLock's PostgreSQL table, as its documentation creates it.
        await conn.execute(
            sql.SQL(
                "CREATE TABLE {} (name varchar(64) NOT NULL PRIMARY KEY, "
                "lock_until timestamp NOT NULL, locked_at timestamp NOT NULL, "
                "locked_by varchar(255) NOT NULL)"
            ).format(shedlock)
        )
        await conn.execute(
            sql.SQL(
                "INSERT INTO {} VALUES ('free', now(), now(), 'bench'), "
                "('held', now() + interval '1 day', now(), 'holder')"
            ).format(shedlock)
        )
    # A free lock is left free (lock_until = now()) so every call changes the row, as a won
    # claim does; the held one never matches.
    shed_free = sql.SQL(
        "UPDATE {} SET lock_until = now(), locked_at = now(), locked_by = %s "
        "WHERE name = %s AND lock_until <= now()"
    ).format(shedlock)
    shed_held = sql.SQL(
        "UPDATE {} SET lock_until = now() + interval '10 minutes', locked_at = now(), "
        "locked_by = %s WHERE name = %s AND lock_until <= now()"
    ).format(shedlock)

    async def advisory() -> None:
        async with pool.connection() as conn, conn.transaction():
            cur = await conn.execute("SELECT pg_try_advisory_xact_lock(%s)", (4242,))
            assert (await cur.fetchone()) == (True,)

    async def shed_won() -> None:
        async with pool.connection() as conn:
            cur = await conn.execute(shed_free, ("bench", "free"))
            assert cur.rowcount == 1

    async def shed_lost() -> None:
        async with pool.connection() as conn:
            cur = await conn.execute(shed_held, ("bench", "held"))
            assert cur.rowcount == 0

    ops: dict[str, Op] = {
        "pg_try_advisory_xact_lock (transaction)": advisory,
        "ShedLock UPDATE, free lock": shed_won,
        "ShedLock UPDATE, held lock": shed_lost,
    }
    kinds = {
        "pg_try_advisory_xact_lock (transaction)": "won",
        "ShedLock UPDATE, free lock": "won",
        "ShedLock UPDATE, held lock": "lost",
    }
    notes: dict[str, str] = {}
    async with AsyncExitStack() as stack:
        skipped = await _apscheduler(target, stack, ops, kinds, notes)
        times = await _interleave(target, ops, n)
    return _rows(target.name, times, kinds, notes), skipped


async def _apscheduler(
    target: Target,
    stack: AsyncExitStack,
    ops: dict[str, Op],
    kinds: dict[str, str],
    notes: dict[str, str],
) -> str | None:
    """Add APScheduler 4's acquire path to `ops`; the reason when it cannot be measured."""
    try:
        from apscheduler import ConflictPolicy, Schedule, Task
        from apscheduler.datastores.sqlalchemy import SQLAlchemyDataStore
        from apscheduler.eventbrokers.local import LocalEventBroker
        from apscheduler.triggers.interval import IntervalTrigger
        from sqlalchemy.ext.asyncio import create_async_engine
    except ImportError as exc:
        return f"APScheduler {APSCHEDULER_PIN} is not installed ({exc}): uv sync --group bench"
    from importlib.metadata import version as installed

    version = installed("apscheduler")
    if version != APSCHEDULER_PIN:
        return f"APScheduler {version} is installed; this benchmark pins {APSCHEDULER_PIN}"
    url = target.env.postgres.replace("postgresql://", "postgresql+psycopg://", 1)
    engine = create_async_engine(url, pool_size=1, max_overflow=0)
    stack.push_async_callback(engine.dispose)
    schema: str = target.schema  # type: ignore[attr-defined]
    datastore = SQLAlchemyDataStore(engine, schema=schema)
    logger = logging.getLogger("bench.apscheduler")
    broker = LocalEventBroker()
    await broker.start(stack, logger)
    await datastore.start(stack, broker, logger)
    await datastore.add_task(Task(id="bench", func="builtins:print", job_executor="async"))
    due = datetime.now(timezone.utc) - timedelta(minutes=1)
    schedule = Schedule(
        id="bench",
        task_id="bench",
        trigger=IntervalTrigger(hours=1),
        next_fire_time=due,
        job_executor="async",
    )
    await datastore.add_schedule(schedule, ConflictPolicy.replace)
    lease = timedelta(hours=1)

    async def acquire_due() -> None:
        got = await datastore.acquire_schedules("bench-a", lease, 1)
        assert len(got) == 1

    async def acquire_held() -> None:
        got = await datastore.acquire_schedules("bench-b", lease, 1)
        assert not got

    won, lost = "APScheduler 4 acquire_schedules, due", "APScheduler 4 acquire_schedules, leased"
    ops[won], ops[lost] = acquire_due, acquire_held
    kinds[won], kinds[lost] = "won", "lost"
    notes[won] = notes[lost] = f"apscheduler=={version}, SQLAlchemy async + psycopg, own pool of 1"
    return None


async def measure_peers(targets: dict[str, Target], n: int) -> dict[str, Any]:
    rows: list[dict[str, Any]] = []
    skipped: dict[str, str] = {}
    if "redis/lease" in targets:
        rows += await redis_peers(targets["redis/lease"], n)
    else:
        skipped["redis"] = "redis/lease did not run"
    if "postgres" in targets:
        pg_rows, aps = await postgres_peers(targets["postgres"], n)
        rows += pg_rows
        if aps:
            skipped["apscheduler"] = aps
    else:
        skipped["postgres"] = "postgres did not run"
    return {"calls_per_kind": n, "rows": rows, "skipped": skipped}
