"""The cost of the fleet's member list (M1) on each store: one heartbeat (`announce`) and one read
of a 200-member list (`members`), median of many, from one process on this machine.

    .venv/bin/python -m bench.members [N]

Uses the shared services (PostgreSQL, Redis, NATS on 127.0.0.1) and a SQLite file in a temporary
directory, each under a fresh prefix (or schema) that `clean` removes afterwards."""

from __future__ import annotations

import asyncio
import statistics
import sys
import tempfile
import time
import uuid

import anarchon
from anarchon import SupportsMembership

ROUNDS = 50


async def measure(url: str, members: int) -> tuple[float, float]:
    prefix = "m" + uuid.uuid4().hex[:10]
    async with anarchon.connect(url, prefix=prefix) as store:
        assert isinstance(store, SupportsMembership)
        names = [f"node-{n:04d}:{n}:abcd" for n in range(members)]
        for name in names:
            await store.announce(name, 60_000, {"claims": 1, "wins": 0})
        beats, reads = [], []
        for i in range(ROUNDS):
            start = time.perf_counter()
            await store.announce(names[i % members], 60_000, {"claims": i, "wins": 1})
            beats.append(time.perf_counter() - start)
            start = time.perf_counter()
            listed = await store.members()
            reads.append(time.perf_counter() - start)
            assert len(listed) == members
    await clean(url, prefix)
    return statistics.median(beats) * 1000, statistics.median(reads) * 1000


async def clean(url: str, prefix: str) -> None:
    """Remove what the run wrote on a shared server."""
    if url.startswith("postgresql"):
        import psycopg

        schema = url.rsplit("schema=", 1)[1]
        async with await psycopg.AsyncConnection.connect(url.split("?")[0], autocommit=True) as c:
            await c.execute(f'DROP SCHEMA IF EXISTS "{schema}" CASCADE')
    elif url.startswith("redis"):
        import redis.asyncio as aioredis

        from anarchon_redis import testing

        client = aioredis.Redis.from_url(url)
        await testing.delete_prefix(client, prefix)
        await client.aclose()
    elif url.startswith("nats"):
        import nats

        nc = await nats.connect(url)
        for name in (f"ANARCHON_{prefix}", f"ANARCHON_{prefix}_MEMBERS"):
            try:
                await nc.jetstream().delete_stream(name)
            except Exception:  # noqa: BLE001, S110 - already gone
                pass
        await nc.close()


async def main(members: int) -> None:
    schema = "bench_" + uuid.uuid4().hex[:8]
    with tempfile.TemporaryDirectory() as tmp:
        urls = {
            "sqlite": f"sqlite:///{tmp}/members.db",
            "postgresql": f"postgresql://postgres@127.0.0.1:5432/test?schema={schema}",
            "redis (lease)": "redis://127.0.0.1:6379/0",
            "nats (msg-id)": "nats://127.0.0.1:4222",
        }
        print(f"{members} members; median of {ROUNDS}: announce ms, members() ms")
        for name, url in urls.items():
            beat, read = await measure(url, members)
            print(f"{name:15} {beat:8.2f} {read:8.2f}")


if __name__ == "__main__":
    asyncio.run(main(int(sys.argv[1]) if len(sys.argv) > 1 else 200))
