"""Latency of a PostgreSQL claim against the cheapest possible write through the same pool.

Median and p99 of N (default 2,000) sequential calls of each kind, interleaved, all through one
`PostgresStore`'s connection pool, so the client, the driver and the network are the same:

* floor: one plain one-row autocommit ``UPDATE`` (a commit with a WAL flush, like a claim);
* won: a claim of a new slot each time (the claim function's lock path: job row lock, INSERT);
* lost: a claim of a run another token holds (the function's read before the lock, no write);
* check: a backup's L10 poll of that live run (one plain SELECT).

Run: ``.venv/bin/python bench/postgres_latency.py [N]`` with ``ANARCHON_TEST_POSTGRES_URL`` set
(default ``postgresql://postgres@127.0.0.1:5432/test``). Target: won <= 1.3x the floor; lost
and check about 1.0x (a read).
"""

from __future__ import annotations

import asyncio
import os
import statistics
import sys
import time
import uuid
from collections.abc import Awaitable, Callable

from psycopg import sql

from anarchon import ClaimRequest, Overlap
from anarchon_postgres import PostgresStore, testing

URL = os.environ.get("ANARCHON_TEST_POSTGRES_URL", "postgresql://postgres@127.0.0.1:5432/test")


async def measure(
    n: int, calls: dict[str, Callable[[int], Awaitable[object]]]
) -> dict[str, list[float]]:
    """Time the kinds interleaved (floor, won, lost, check, floor, ...), so that load from
    elsewhere on the machine falls on all of them alike."""
    for i in range(min(100, n)):  # warm up: plans cached, connection hot
        for call in calls.values():
            await call(-i - 1)
    times: dict[str, list[float]] = {name: [] for name in calls}
    for i in range(n):
        for name, call in calls.items():
            started = time.perf_counter()
            await call(i)
            times[name].append(time.perf_counter() - started)
    return times


def summary(times: list[float]) -> tuple[float, float]:
    ordered = sorted(times)
    return statistics.median(ordered), ordered[int(len(ordered) * 0.99) - 1]


async def main(n: int) -> None:
    schema = "bench_" + uuid.uuid4().hex[:12]
    sep = "&" if "?" in URL else "?"
    store = PostgresStore.create(f"{URL}{sep}schema={schema}", pool_min_size=1, pool_max_size=1)
    await store.open()
    pool = store._pool
    assert pool is not None
    floor_table = sql.Identifier(schema, "bench_floor")
    async with pool.connection() as conn:
        await conn.execute(
            sql.SQL("CREATE TABLE {} (id int PRIMARY KEY, n bigint)").format(floor_table)
        )
        await conn.execute(sql.SQL("INSERT INTO {} VALUES (1, 0)").format(floor_table))
    update = sql.SQL("UPDATE {} SET n = n + 1 WHERE id = %s").format(floor_table)
    try:
        now = await store.now_ms()
        base = now - 3_000_000

        async def floor(_: int) -> None:
            async with pool.connection() as conn:
                await conn.execute(update, (1,))

        def request(slot: int, instance: str = "bench") -> ClaimRequest:
            return ClaimRequest(
                job="bench",
                slot=slot,
                instance=instance,
                lease_ms=3_600_000,
                max_late_ms=3_600_000,
                overlap=Overlap.ALLOW,
            )

        async def won(i: int) -> None:
            claim = await store.claim(request(base + 1000 * (i + 200)))  # a new slot
            assert claim.won, claim

        held = request(now, "holder")
        assert (await store.claim(held)).won

        async def lost(_: int) -> None:
            claim = await store.claim(request(now))
            assert claim.outcome.value == "running", claim

        async def check(_: int) -> None:
            claim = await store.check(request(now))
            assert claim.outcome.value == "running", claim

        calls = {"floor": floor, "won": won, "lost": lost, "check": check}
        results = {name: summary(t) for name, t in (await measure(n, calls)).items()}
        f50, f99 = results["floor"]
        print(f"{n} sequential calls each, one pooled connection, PostgreSQL at {store.where}")
        print(f"{'':8}{'median ms':>12}{'p99 ms':>10}{'x floor p50':>14}{'x floor p99':>14}")
        for name, (p50, p99) in results.items():
            print(f"{name:8}{p50 * 1000:12.3f}{p99 * 1000:10.3f}{p50 / f50:14.2f}{p99 / f99:14.2f}")
    finally:
        await store.close()
        testing.drop(URL, schema)


if __name__ == "__main__":
    asyncio.run(main(int(sys.argv[1]) if len(sys.argv) > 1 else 2000))
