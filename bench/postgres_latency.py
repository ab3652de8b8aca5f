"""Latency of PostgreSQL claims, side by side with the cheapest write, a bare read and two peers.

Every kind is timed interleaved (one call of each, then one of each again, in a new seeded random
order each time) through one `PostgresStore`'s pooled connection, so the driver, the network and
the load from elsewhere on the machine are the same for all, and no kind always runs right after
the same other one. What a call needs (a claim's request, the next slot) is built before its
clock starts, as `bench/latency.py` does; every statement is rendered to bytes once.

* floor: one plain one-row autocommit ``UPDATE`` (a commit with a WAL flush, like a claim won),
  through the pool's ``connection()`` context and a new cursor, as an application writes it;
* select1: ``SELECT 1``, the cheapest round trip (what a claim lost is compared with), likewise;
* floor lean, select1 lean: the same two statements through the store's own path (the pool's
  ``getconn``/``putconn`` and the store's cursor of that connection), which every claim takes:
  the ratios to these compare the server's work and the protocol, not the client's;
* won: a claim of a new slot each time (the claim function's lock path: job row lock, INSERT),
  overlap ``allow``;
* won skip: the same with overlap ``skip`` (the scheduler's default on PostgreSQL): the overlap
  check reads the job's live runs (the run won is finished after its clock stops);
* lost: a claim of a run another token holds (the function's read before the lock, no write);
* check: a backup's L10 poll of that live run (the claim function's read before the lock);
* call floor: ``SELECT`` of a PL/pgSQL function with the claim function's signature (one text in,
  one text out) that only returns a constant, on the store's path and sent as the store sends a
  claim (the request inline): what calling any such function costs here, before it reads or
  writes anything;
* shedlock won / lost: ShedLock's lock, one ``UPDATE shedlock SET lock_until = ..., locked_at =
  ..., locked_by = ... WHERE name = ? AND lock_until <= now()``, on a free lock (one row changed)
  and on a held one (none), on the store's path;
* advisory: ``BEGIN; SELECT pg_try_advisory_xact_lock(k); COMMIT`` (psycopg's transaction block,
  three round trips: the lock is held by the open transaction, released by the commit).

Then ``claim_many`` of 10,000 jobs of one slot: one call of the batch function ``<table>_claim_many``
(set-based: one read of every run, one lock statement, one INSERT, one retention seek per job),
timed on a new slot (10,000 wins) and again by another instance (10,000 losses), requests built
before the clock starts.

Each run prints its medians and p99s; the summary gives, for each ratio, the median over runs and
the spread (min-max). Run::

    .venv/bin/python bench/postgres_latency.py [--calls 2000] [--runs 5] [--many 10000]

with ``ANARCHON_TEST_POSTGRES_URL`` set (default ``postgresql://postgres@127.0.0.1:5432/test``).
Targets (issue 6): won <= 1.3x floor; lost <= 1.3x select1; claim_many of 10,000 <= 0.2 s.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import random
import statistics
import time
import uuid
from collections.abc import Awaitable, Callable
from typing import Any

from psycopg import sql

from anarchon import ClaimRequest, Outcome, Overlap, RunStatus
from anarchon_postgres import PostgresStore, testing
from anarchon_postgres._rows import INLINE_QUOTE

URL = os.environ.get("ANARCHON_TEST_POSTGRES_URL", "postgresql://postgres@127.0.0.1:5432/test")

Call = Callable[[Any], Awaitable[object]]
Prepare = Callable[[int], Awaitable[Any]]
Kind = tuple[Prepare | None, Call]
"""How to build a call's argument (untimed; None: the call takes the iteration number), and the
call that is timed."""

CALL_FLOOR = """
CREATE FUNCTION {}(p text, skip_reason text) RETURNS text
LANGUAGE plpgsql VOLATILE AS $$ BEGIN RETURN 'running 1 0 running 0   holder'; END $$
"""
"""The claim function's signature (the packed request and the skip reason in, one text out) with
a body that only returns a constant answer (the "call floor")."""

RATIOS = [
    ("won / floor", "won", "floor"),
    ("lost / select1", "lost", "select1"),
    ("won / floor lean", "won", "floor lean"),
    ("lost / select1 lean", "lost", "select1 lean"),
    ("won skip / floor", "won skip", "floor"),
    ("won skip / floor lean", "won skip", "floor lean"),
    ("check / select1 lean", "check", "select1 lean"),
    ("call floor / select1 lean", "call floor", "select1 lean"),
    ("lost / call floor", "lost", "call floor"),
    ("floor / floor lean", "floor", "floor lean"),
    ("select1 / select1 lean", "select1", "select1 lean"),
    ("shedlock won / won", "shedlock won", "won"),
    ("shedlock lost / lost", "shedlock lost", "lost"),
    ("advisory / won", "advisory", "won"),
]
TARGETS = {"won / floor": 1.3, "lost / select1": 1.3}


async def measure(n: int, kinds: dict[str, Kind]) -> dict[str, list[float]]:
    """Time the kinds interleaved, so that load from elsewhere falls on all of them alike, in a
    new order each time (seeded): what a call follows matters here (a call right after a commit's
    WAL flush is slower), and a fixed or rotating order would put each after the same one."""
    times: dict[str, list[float]] = {name: [] for name in kinds}
    order = list(kinds.items())
    shuffle = random.Random(6).shuffle
    for i in range(-min(200, n), n):  # a warm-up first: plans cached, connection hot
        shuffle(order)
        for name, (prepare, call) in order:
            argument = i if prepare is None else await prepare(i)
            started = time.perf_counter()
            await call(argument)
            elapsed = time.perf_counter() - started
            if i >= 0:
                times[name].append(elapsed)
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
        self.update = self.shed_won = self.shed_lost = self.call_floor = b""
        self.skip_won: list[ClaimRequest] = []  # the last run `won skip` won, not finished yet

    @property
    def pool(self):  # type: ignore[no-untyped-def]
        pool = self.store._db.pool  # the store's pool (anarchon_postgres._connection)
        assert pool is not None
        return pool

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
        update = sql.SQL("UPDATE {} SET n = n + 1 WHERE id = %s").format(floor_table)
        # ShedLock's usual lock statement; a free lock is left free (lock_until = now) so that
        # every call changes the row, as a won claim does.
        shed_won = sql.SQL(
            "UPDATE {} SET lock_until = now(), locked_at = now(), locked_by = %s "
            "WHERE name = %s AND lock_until <= now()"
        ).format(shedlock)
        shed_lost = sql.SQL(
            "UPDATE {} SET lock_until = now() + interval '10 minutes', locked_at = now(), "
            "locked_by = %s WHERE name = %s AND lock_until <= now()"
        ).format(shedlock)
        call_floor = sql.Identifier(self.schema, "bench_call_floor")
        async with self.pool.connection() as conn:
            await conn.execute(sql.SQL(CALL_FLOOR).format(call_floor))
            # Rendered once, as the store renders its own statements.
            self.update, self.shed_won, self.shed_lost, self.call_floor = (
                q.as_bytes(conn)
                for q in (
                    update,
                    shed_won,
                    shed_lost,
                    # The request inline and dollar-quoted, as the store sends a claim.
                    sql.SQL("SELECT {}(" + INLINE_QUOTE).format(call_floor),
                )
            )
        self.now = await self.store.now_ms()
        self.next_slot = self.now - 3_000_000_000  # far from the held slot; max_late covers it
        assert (await self.store.claim(self.request(self.now, "holder"))).won

    def request(
        self,
        slot: int,
        instance: str = "bench",
        job: str = "bench",
        overlap: Overlap = Overlap.ALLOW,
    ) -> ClaimRequest:
        return ClaimRequest(
            job=job,
            slot=slot,
            instance=instance,
            lease_ms=3_600_000,
            max_late_ms=4_000_000_000,
            overlap=overlap,
        )

    def calls(self) -> dict[str, Kind]:
        pool, store = self.pool, self.store
        update, shed_won, shed_lost = self.update, self.shed_won, self.shed_lost

        async def floor(_: int) -> None:
            async with pool.connection() as conn:
                await conn.execute(update, (1,))

        async def select1(_: int) -> None:
            async with pool.connection() as conn:
                await (await conn.execute(b"SELECT 1")).fetchone()

        async def rowcount(statement: bytes, params: tuple[Any, ...]) -> int:
            """`statement` on the store's path: its pool's getconn/putconn, its cursor."""

            async def step(cur: Any) -> int:
                await cur.execute(statement, params)
                return int(cur.rowcount)

            return await store._db.run(step)

        async def floor_lean(_: int) -> None:
            assert await rowcount(update, (1,)) == 1

        async def select1_lean(_: int) -> None:
            await store._fetchone(b"SELECT 1", None)

        async def new_slot(_: int) -> ClaimRequest:
            self.next_slot += 1000
            return self.request(self.next_slot)

        async def won(request: ClaimRequest) -> None:
            claim = await store.claim(request)
            assert claim.won, claim

        previous = self.skip_won

        async def new_skip_slot(_: int) -> ClaimRequest:
            while previous:  # the last run won is finished, so this slot is not an overlap
                done = previous.pop()
                assert await store.finish(done.job, done.slot, done.token, RunStatus.SUCCEEDED)
            self.next_slot += 1000
            previous.append(self.request(self.next_slot, job="bench-skip", overlap=Overlap.SKIP))
            return previous[-1]

        async def won_skip(request: ClaimRequest) -> None:
            claim = await store.claim(request)
            assert claim.won, claim

        held = self.request(self.now)

        async def lost(_: int) -> None:
            claim = await store.claim(held)
            assert claim.outcome is Outcome.RUNNING, claim

        async def check(_: int) -> None:
            claim = await store.check(held)
            assert claim.outcome is Outcome.RUNNING, claim

        call = self.call_floor + f"{self.store._packed(held)}{INLINE_QUOTE}::text, NULL)".encode()

        async def call_floor(_: int) -> None:
            await store._fetchone(call, None)

        async def shedlock_won(_: int) -> None:
            assert await rowcount(shed_won, ("bench", "free")) == 1

        async def shedlock_lost(_: int) -> None:
            assert await rowcount(shed_lost, ("bench", "held")) == 0

        async def advisory(i: int) -> None:
            async with pool.connection() as conn, conn.transaction():
                cur = await conn.execute(b"SELECT pg_try_advisory_xact_lock(%s)", (4242,))
                assert (await cur.fetchone()) == (True,)

        return {
            "floor": (None, floor),
            "select1": (None, select1),
            "floor lean": (None, floor_lean),
            "select1 lean": (None, select1_lean),
            "won": (new_slot, won),
            "won skip": (new_skip_slot, won_skip),
            "lost": (None, lost),
            "check": (None, check),
            "call floor": (None, call_floor),
            "shedlock won": (None, shedlock_won),
            "shedlock lost": (None, shedlock_lost),
            "advisory": (None, advisory),
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
            print("  " + ", ".join(f"{name} {ratios[name][-1]:.2f}" for name in TARGETS))
        print(f"\nsummary over {runs} runs: median (min-max)")
        for name, values in medians.items():
            print(f"  {name + ' ms':27}{spread([v * 1000 for v in values])}")
        for name, _, _ in RATIOS:
            target = f"  target <= {TARGETS[name]}" if name in TARGETS else ""
            print(f"  {name:27}{spread(ratios[name])}{target}")
        print(f"  {'claim_many won s':27}{spread(many['won'])}  target <= 0.2")
        print(f"  {'claim_many lost s':27}{spread(many['lost'])}  target <= 0.2")
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
