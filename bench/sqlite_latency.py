"""Latency of a SQLite claim against the cheapest possible write on the same file.

Median and p99 of 2,000 sequential calls of each kind, all through one single-thread worker
awaited from asyncio (the way `SQLiteStore` runs every sqlite3 call):

* baseline: one plain one-row autocommit ``UPDATE`` on a table of the same file;
* bare-sql: the claim's win path as bare SQL (BEGIN IMMEDIATE, SELECT, INSERT, COMMIT) with no
  decision in Python: the floor any implementation of that path can reach;
* won: a claim of a new slot each time (BEGIN IMMEDIATE, SELECT, INSERT, COMMIT);
* lost: a claim of a run another token holds (the loser also takes the write lock);
* check: a backup's L10 poll of that live run (a plain read, no lock).

Run: ``.venv/bin/python bench/sqlite_latency.py [N]``. The won path is meant to stay within 1.2x
of the baseline.
"""

from __future__ import annotations

import asyncio
import sqlite3
import statistics
import sys
import tempfile
import time
from pathlib import Path

from anarchon import ClaimRequest, Overlap
from anarchon_sqlite import SQLiteStore


def summary(samples: list[float]) -> tuple[float, float]:
    ordered = sorted(samples)
    return statistics.median(ordered), ordered[int(len(ordered) * 0.99) - 1]


async def main(n: int) -> None:
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "bench.db"
        store = SQLiteStore.create(path)
        await store.open()

        # The baseline runs on the store's own worker thread and connection, so that it pays
        # exactly the same thread hop; it writes a table of its own in the same file.
        def setup(conn: sqlite3.Connection) -> None:
            conn.execute("CREATE TABLE IF NOT EXISTS bench (id INTEGER PRIMARY KEY, n INTEGER)")
            conn.execute("INSERT OR IGNORE INTO bench VALUES (1, 0)")

        run = store._worker.run  # bench only: the store's single worker thread
        await run(setup)

        def update(conn: sqlite3.Connection, i: int) -> None:
            conn.execute("UPDATE bench SET n = ? WHERE id = 1", (i,))

        async def baseline(i: int) -> None:
            await run(update, i)

        def bare_claim(conn: sqlite3.Connection, i: int) -> None:
            # The prescribed win path in bare SQL, with no decision in Python: the floor of `won`.
            conn.execute("BEGIN IMMEDIATE")
            conn.execute(
                "SELECT status FROM anarchon_runs WHERE prefix = 'bare' AND job = 'j' AND slot = ?",
                (i,),
            ).fetchone()
            conn.execute(
                "INSERT INTO anarchon_runs VALUES ('bare', 'j', ?, 'running', 1, ?, 'bench', ?, ?,"
                " NULL, NULL, ?)",
                (i, "0" * 32, i, i + 60_000, i + 300_000),
            )
            conn.execute("COMMIT")

        async def bare(i: int) -> None:
            await run(bare_claim, i + 50)

        now = await store.now_ms()
        base_slot = now - 1000

        # Requests are built before timing: only the store's work is measured.
        fresh = [
            ClaimRequest(job="bench", slot=base_slot + i, instance="bench", overlap=Overlap.ALLOW)
            for i in range(-50, n)
        ]

        async def won(i: int) -> None:
            claim = await store.claim(fresh[i + 50])
            assert claim.won, claim

        held = ClaimRequest(job="held", slot=base_slot, instance="holder", lease_ms=3_600_000)
        assert (await store.claim(held)).won
        other = ClaimRequest(job="held", slot=base_slot, instance="backup")

        async def lost(i: int) -> None:
            claim = await store.claim(other)
            assert claim.outcome.value == "running", claim

        async def check(i: int) -> None:
            claim = await store.check(other)
            assert claim.outcome.value == "running", claim

        calls = {"baseline": baseline, "bare-sql": bare, "won": won, "lost": lost, "check": check}
        results: dict[str, list[float]] = {name: [] for name in calls}
        for i in range(-50, n):  # the first 50 rounds warm the caches and are not counted
            # One call of each kind per round, so drift of a busy machine hits every kind alike.
            for name, call in calls.items():
                start = time.perf_counter_ns()
                await call(i)
                if i >= 0:
                    results[name].append((time.perf_counter_ns() - start) / 1000)
        await store.close()

    base_median, base_p99 = summary(results["baseline"])
    print(
        f"{n} sequential calls each, SQLite {sqlite3.sqlite_version}, Python {sys.version.split()[0]}"
    )
    print(f"{'path':<10}{'median us':>12}{'p99 us':>12}{'median ratio':>15}{'p99 ratio':>12}")
    for name, samples in results.items():
        median, p99 = summary(samples)
        print(
            f"{name:<10}{median:>12.1f}{p99:>12.1f}{median / base_median:>15.2f}"
            f"{p99 / base_p99:>12.2f}"
        )


if __name__ == "__main__":
    asyncio.run(main(int(sys.argv[1]) if len(sys.argv) > 1 else 2000))
