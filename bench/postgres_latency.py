"""Latency of PostgreSQL claims, side by side with the cheapest write, a bare read and two peers.

Every kind is timed interleaved (floor, select1, won, lost, ... floor, select1, ...) through one
`PostgresStore`'s pooled connection, so the client, the driver, the network and the load from
elsewhere on the machine are the same for all:

* floor: one plain one-row autocommit ``UPDATE`` (a commit with a WAL flush, like a claim won);
* select1: ``SELECT 1``, the cheapest round trip (what a claim lost is compared with);
* won: a claim of a new slot each time (the claim function's lock path: job row lock, INSERT);
* lost: a claim of a run another token holds (the function's read before the lock, no write);
* check: a backup's L10 poll of that live run (one plain SELECT);
* call floor: ``SELECT * FROM`` a PL/pgSQL function with the claim function's 13 arguments and
  8 result columns that only returns constants: what calling any such function costs here,
  before it reads or writes anything;
* shedlock won / lost: ShedLock's lock, one ``UPDATE shedlock SET lock_until = ..., locked_at =
  ..., locked_by = ... WHERE name = ? AND lock_until <= now()``, on a free lock (one row changed)
  and on a held one (none);
* advisory: ``BEGIN; SELECT pg_try_advisory_xact_lock(k); COMMIT`` (psycopg's transaction block,
  three round trips: the lock is held by the open transaction, released by the commit).

Then ``claim_many`` of 10,000 jobs of one slot: one call of the batch function ``<table>_claim_many``
(set-based: one read of every run, one lock statement, one INSERT), timed on a new slot (10,000
wins) and again by another instance (10,000 losses).

Each run prints its medians and p99s; the summary gives, for each ratio, the median over runs and
the spread (min-max). Run::

    .venv/bin/python bench/postgres_latency.py [--calls 2000] [--runs 5] [--many 10000]

with ``ANARCHON_TEST_POSTGRES_URL`` set (default ``postgresql://postgres@127.0.0.1:5432/test``).
Targets: won <= 1.3x floor; lost <= 1.3x select1; claim_many of 10,000 <= 0.2 s.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import statistics
import time
import uuid
from collections.abc import Awaitable, Callable

from psycopg import sql

from anarchon import ClaimRequest, Outcome, Overlap
from anarchon_postgres import PostgresStore, testing

URL = os.environ.get("ANARCHON_TEST_POSTGRES_URL", "postgresql://postgres@127.0.0.1:5432/test")

Call = Callable[[int], Awaitable[object]]

CALL_FLOOR = """
CREATE FUNCTION {}(
    p_prefix text, p_job text, p_slot bigint, p_token text, p_holder text,
    p_lease_ms bigint, p_max_late_ms bigint, p_skip_overlap boolean, p_attempts integer,
    p_keep_until bigint, p_history_limit integer, p_lock_timeout_ms integer, p_now bigint,
    OUT o_outcome text, OUT o_attempt integer, OUT o_token text, OUT o_holder text,
    OUT o_lease_until bigint, OUT o_status text, OUT o_now bigint, OUT o_floor bigint)
LANGUAGE plpgsql VOLATILE AS $$ BEGIN o_outcome := 'running'; o_attempt := 1; END $$
"""
"""The claim function's signature with a body that does nothing (the "call floor")."""

RATIOS = [
    ("won / floor", "won", "floor"),
    ("lost / select1", "lost", "select1"),
    ("check / select1", "check", "select1"),
    ("call floor / select1", "call floor", "select1"),
    ("lost / call floor", "lost", "call floor"),
    ("shedlock won / won", "shedlock won", "won"),
    ("shedlock lost / lost", "shedlock lost", "lost"),
    ("advisory / won", "advisory", "won"),
]


async def measure(n: int, calls: dict[str, Call]) -> dict[str, list[float]]:
    """Time the kinds interleaved, so that load from elsewhere falls on all of them alike."""
    for i in range(min(200, n)):  # warm up: plans cached, connection hot
        for call in calls.values():
            await call(-i - 1)
    times: dict[str, list[float]] = {name: [] for name in calls}
    for i in range(n):
        for name, call in calls.items():
            started = time.perf_counter()
            await call(i)
            times[name].append(time.perf_counter() - started)
    return times


def p50_p99(times: list[float]) -> tuple[float, float]:
    ordered = sorted(times)
    return statistics.median(ordered), ordered[max(int(len(ordered) * 0.99) - 1, 0)]


class Bench:
    def __init__(self, store: PostgresStore, schema: str) -> None:
        self.store = store
        self.schema = schema
        self.now = 0
        self.next_slot = 0

    @property
    def pool(self):  # type: ignore[no-untyped-def]
        assert self.store._pool is not None
        return self.store._pool

    async def setup(self) -> None:
        floor_table = sql.Identifier(self.schema, "bench_floor")
        shedlock = sql.Identifier(self.schema, "shedlock")
        async with self.pool.connection() as conn:
            await conn.execute(
                sql.SQL("CREATE TABLE {} (id int PRIMARY KEY, n bigint)").format(floor_table)
            )
            await conn.execute(sql.SQL("INSERT INTO {} VALUES (1, 0)").format(floor_table))
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
        self.update = sql.SQL("UPDATE {} SET n = n + 1 WHERE id = %s").format(floor_table)
        # ShedLock's usual lock statement; a free lock is left free (lock_until = now) so that
        # every call changes the row, as a won claim does.
        self.shed_won = sql.SQL(
            "UPDATE {} SET lock_until = now(), locked_at = now(), locked_by = %s "
            "WHERE name = %s AND lock_until <= now()"
        ).format(shedlock)
        self.shed_lost = sql.SQL(
            "UPDATE {} SET lock_until = now() + interval '10 minutes', locked_at = now(), "
            "locked_by = %s WHERE name = %s AND lock_until <= now()"
        ).format(shedlock)
        self.call_floor = sql.SQL(
            "SELECT * FROM {}(%s, %s, %s, %s, %s, %s, %s, %s, %s, %s, %s, %s, %s)"
        ).format(sql.Identifier(self.schema, "bench_call_floor"))
        async with self.pool.connection() as conn:
            await conn.execute(
                sql.SQL(CALL_FLOOR).format(sql.Identifier(self.schema, "bench_call_floor"))
            )
        self.now = await self.store.now_ms()
        self.next_slot = self.now - 3_000_000_000  # far from the held slot; max_late covers it
        assert (await self.store.claim(self.request(self.now, "holder"))).won

    def request(self, slot: int, instance: str = "bench", job: str = "bench") -> ClaimRequest:
        return ClaimRequest(
            job=job,
            slot=slot,
            instance=instance,
            lease_ms=3_600_000,
            max_late_ms=4_000_000_000,
            overlap=Overlap.ALLOW,
        )

    def calls(self) -> dict[str, Call]:
        pool, store = self.pool, self.store

        async def floor(_: int) -> None:
            async with pool.connection() as conn:
                await conn.execute(self.update, (1,))

        async def select1(_: int) -> None:
            async with pool.connection() as conn:
                await (await conn.execute("SELECT 1")).fetchone()

        async def won(_: int) -> None:
            self.next_slot += 1000
            claim = await store.claim(self.request(self.next_slot))  # a new slot
            assert claim.won, claim

        async def lost(_: int) -> None:
            claim = await store.claim(self.request(self.now))
            assert claim.outcome is Outcome.RUNNING, claim

        async def check(_: int) -> None:
            claim = await store.check(self.request(self.now))
            assert claim.outcome is Outcome.RUNNING, claim

        call_args = self.store._args(self.request(self.now))

        async def call_floor(_: int) -> None:
            async with pool.connection() as conn:
                await (await conn.execute(self.call_floor, call_args)).fetchone()

        async def shed_won(_: int) -> None:
            async with pool.connection() as conn:
                cur = await conn.execute(self.shed_won, ("bench", "free"))
                assert cur.rowcount == 1

        async def shed_lost(_: int) -> None:
            async with pool.connection() as conn:
                cur = await conn.execute(self.shed_lost, ("bench", "held"))
                assert cur.rowcount == 0

        async def advisory(i: int) -> None:
            async with pool.connection() as conn, conn.transaction():
                cur = await conn.execute("SELECT pg_try_advisory_xact_lock(%s)", (4242,))
                assert (await cur.fetchone()) == (True,)

        return {
            "floor": floor,
            "select1": select1,
            "won": won,
            "lost": lost,
            "check": check,
            "call floor": call_floor,
            "shedlock won": shed_won,
            "shedlock lost": shed_lost,
            "advisory": advisory,
        }

    async def claim_many(self, jobs: int, run: int) -> tuple[float, float]:
        """Seconds for `jobs` jobs of one new slot: won by one instance, then lost by another."""
        slot = self.now - 1000 * (run + 1)
        names = [f"many-{j:05d}" for j in range(jobs)]
        first = [self.request(slot, "a", job) for job in names]
        second = [self.request(slot, "b", job) for job in names]
        started = time.perf_counter()
        claims = await self.store.claim_many(first)
        won = time.perf_counter() - started
        assert all(c.won for c in claims), "claim_many: not every first claim won"
        started = time.perf_counter()
        claims = await self.store.claim_many(second)
        lost = time.perf_counter() - started
        assert all(c.outcome is Outcome.RUNNING for c in claims), "claim_many: a second won"
        return won, lost


def spread(values: list[float]) -> str:
    return f"{statistics.median(values):6.2f}  ({min(values):.2f}-{max(values):.2f})"


async def main(calls_per_kind: int, runs: int, jobs: int) -> None:
    schema = "bench_" + uuid.uuid4().hex[:12]
    sep = "&" if "?" in URL else "?"
    store = PostgresStore.create(f"{URL}{sep}schema={schema}", pool_min_size=1, pool_max_size=1)
    await store.open()
    bench = Bench(store, schema)
    ratios: dict[str, list[float]] = {name: [] for name, _, _ in RATIOS}
    medians: dict[str, list[float]] = {}
    many: dict[str, list[float]] = {"won": [], "lost": []}
    try:
        await bench.setup()
        await bench.claim_many(jobs, -1)  # the first batch also creates the jobs' rows
        print(f"PostgreSQL at {store.where}, one pooled connection")
        print(f"{runs} runs of {calls_per_kind} interleaved calls of each kind\n")
        for run in range(runs):
            results = {
                k: p50_p99(t) for k, t in (await measure(calls_per_kind, bench.calls())).items()
            }
            won, lost = await bench.claim_many(jobs, run)
            many["won"].append(won)
            many["lost"].append(lost)
            print(f"run {run + 1}: {'median ms':>10}{'p99 ms':>9}")
            for name, (p50, p99) in results.items():
                medians.setdefault(name, []).append(p50)
                print(f"  {name:14}{p50 * 1000:8.3f}{p99 * 1000:9.3f}")
            print(f"  claim_many of {jobs}: won {won:.3f} s, lost {lost:.3f} s")
            for name, top, bottom in RATIOS:
                ratios[name].append(results[top][0] / results[bottom][0])
            print("  " + ", ".join(f"{name} {ratios[name][-1]:.2f}" for name, _, _ in RATIOS))
        print(f"\nsummary over {runs} runs: median (min-max)")
        for name, values in medians.items():
            print(f"  {name + ' ms':22}{spread([v * 1000 for v in values])}")
        for name, _, _ in RATIOS:
            print(f"  {name:22}{spread(ratios[name])}")
        print(f"  {'claim_many won s':22}{spread(many['won'])}")
        print(f"  {'claim_many lost s':22}{spread(many['lost'])}")
    finally:
        await store.close()
        testing.drop(URL, schema)


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--calls", type=int, default=2000, help="calls of each kind per run")
    parser.add_argument("--runs", type=int, default=5, help="runs (report median and spread)")
    parser.add_argument("--many", type=int, default=10_000, help="jobs in one claim_many")
    args = parser.parse_args()
    asyncio.run(main(args.calls, args.runs, args.many))
