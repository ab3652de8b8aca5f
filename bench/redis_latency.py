"""Latency of a Redis claim, per strategy, against PING on the same connection.

Median and p99 of N (default 2,000) sequential calls of each kind, interleaved, all through the
store's own redis-py client, so the client, the driver and the network are the same:

* ping: ``PING`` through redis-py's ``client.ping()`` (one round trip, no work: the floor the
  targets are ratios to, as in ``bench/_targets.py``);
* lean ping: ``PING`` packed by hand and sent the way the store sends its claims
  (`anarchon_redis._wire`): how much of a round trip here is redis-py's generic command path;
* won: a claim of a new slot each time;
* lost: a claim of a slot another token holds;
* eval floor (lease): ``EVALSHA`` of a script that only returns a constant claim answer, with
  the claim's keys and arguments, sent as the claim is sent: what any one-script claim costs
  here before it reads or writes a key.

Each line gives the median against both pings.

Strategies: lease, stream-id, script on ``ANARCHON_TEST_REDIS_URL`` (default
``redis://127.0.0.1:6379/0``); idmp on a private Redis 8.6 when ``scripts/redis-servers`` has
installed it. Run: ``.venv/bin/python bench/redis_latency.py [N]``. Target: <= 1.3x PING.

``bench/redis_latency.py --parsers [N]`` compares redis-py's two reply parsers instead: two
stores of each strategy, one reading replies with hiredis (anarchon-redis's default, through
``redis[hiredis]``) and one with redis-py's pure-Python parser, their lean PING, won and lost
claims interleaved; it prints each store's medians in µs and as ratios to its own lean PING.
"""

from __future__ import annotations

import asyncio
import os
import statistics
import sys
import time
import uuid
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

from anarchon import ClaimRequest, Overlap
from anarchon_redis import RedisStore, _wire, testing

sys.path.append(str(Path(__file__).resolve().parents[1] / "anarchon-redis" / "tests"))
import redis_servers  # the tests' private server launcher: not in the wheel

URL = os.environ.get("ANARCHON_TEST_REDIS_URL", "redis://127.0.0.1:6379/0")
EVAL_FLOOR = "return 'won 1 1764000060000 running 1764000000000 -'"
KINDS = ("won", "lost", "eval floor", "lean ping")


def summary(samples: list[float]) -> tuple[float, float]:
    ordered = sorted(samples)
    return statistics.median(ordered), ordered[int(len(ordered) * 0.99) - 1]


async def timed(call: Callable[[], Awaitable[object]]) -> float:
    start = time.perf_counter()
    await call()
    return (time.perf_counter() - start) * 1e6


async def bench(url: str, strategy: str, n: int) -> None:
    prefix = "bench" + uuid.uuid4().hex[:8]
    store = RedisStore.create(url, strategy=strategy, prefix=prefix)
    await store.open()
    client = store.client
    lease: Any = store.strategy  # its claim script's packer, for the "eval floor" call
    try:
        now = await store.now_ms()
        held = ClaimRequest(job="held", slot=now, instance="bench:1:aaaa", overlap=Overlap.ALLOW)
        await store.claim(held)
        times: dict[str, list[float]] = {kind: [] for kind in ("ping", *KINDS)}
        floor_sha = await client.script_load(EVAL_FLOOR)
        pool = client.connection_pool
        lean_ping = _wire.command(["PING"])
        base = now - 1_000
        for i in range(n):
            won = ClaimRequest(  # 50 jobs, each claiming its next slot in turn
                job=f"won{i % 50}",
                slot=base + i // 50,
                instance="bench:1:aaaa",
                overlap=Overlap.ALLOW,
            )
            lost = ClaimRequest(job="held", slot=now, instance="bench:2:bbbb")
            times["ping"].append(await timed(client.ping))
            times["won"].append(await timed(lambda r=won: store.claim(r)))  # type: ignore[misc]
            times["lost"].append(await timed(lambda r=lost: store.claim(r)))  # type: ignore[misc]
            times["lean ping"].append(await timed(lambda: _wire.send(pool, [lean_ping])))
            if strategy == "lease":
                call = _wire.invoke(
                    f"$7\r\nEVALSHA\r\n$40\r\n{floor_sha}\r\n",
                    lease.keys_per_job,
                    lease._wire_keys(won.job),
                    2,
                    lease._option + _wire.bulk(lease._ask(won)),
                )
                times["eval floor"].append(
                    await timed(lambda c=call: _wire.send(pool, [c]))  # type: ignore[misc]
                )
        ping_median, ping_p99 = summary(times["ping"])
        lean_median, _ = summary(times["lean ping"])
        for kind in KINDS:
            if not times[kind]:
                continue
            median, p99 = summary(times[kind])
            print(
                f"{strategy:9} {kind:10} median {median:6.1f} us = {median / ping_median:4.2f}x "
                f"PING {ping_median:.1f}, {median / lean_median:4.2f}x lean PING "
                f"{lean_median:.1f}   p99 {p99:7.1f} us ({p99 / ping_p99:4.2f}x)"
            )
    finally:
        await testing.delete_prefix(store.client, prefix)
        await store.close()


async def compare_parsers(url: str, strategy: str, n: int) -> None:
    """Lean PING, won and lost claims on a hiredis store and a pure-Python one, interleaved."""
    from redis._parsers import _AsyncHiredisParser, _AsyncRESP2Parser

    prefix = "bench" + uuid.uuid4().hex[:8]
    stores: dict[str, RedisStore] = {}
    for name, parser in (("hiredis", _AsyncHiredisParser), ("python", _AsyncRESP2Parser)):
        store = RedisStore.create(url, strategy=strategy, prefix=f"{prefix}{name}")
        await store.open()
        pool = store.client.connection_pool
        pool.connection_kwargs["parser_class"] = parser
        await pool.disconnect()
        pool.reset()  # type: ignore[no-untyped-call]  # new connections read with `parser`
        stores[name] = store
    try:
        now = await stores["hiredis"].now_ms()
        lean_ping = _wire.command(["PING"])
        times: dict[tuple[str, str], list[float]] = {
            (name, kind): [] for name in stores for kind in ("ping", "won", "lost")
        }
        for store in stores.values():
            await store.claim(ClaimRequest(job="held", slot=now, instance="bench:1:aaaa"))
        for i in range(n):
            for name, store in stores.items():
                pool = store.client.connection_pool
                won = ClaimRequest(
                    job=f"won{i % 50}",
                    slot=now - 1_000 + i // 50,
                    instance="bench:1:aaaa",
                    overlap=Overlap.ALLOW,
                )
                lost = ClaimRequest(job="held", slot=now, instance="bench:2:bbbb")
                times[name, "ping"].append(await timed(lambda p=pool: _wire.send(p, [lean_ping])))  # type: ignore[misc]
                times[name, "won"].append(await timed(lambda s=store, r=won: s.claim(r)))  # type: ignore[misc]
                times[name, "lost"].append(await timed(lambda s=store, r=lost: s.claim(r)))  # type: ignore[misc]
        for name in stores:
            ping, _ = summary(times[name, "ping"])
            cells = []
            for kind in ("won", "lost"):
                median, _ = summary(times[name, kind])
                cells.append(f"{kind} {median:6.1f} us = {median / ping:4.2f}x")
            print(f"{strategy:9} {name:8} lean PING {ping:6.1f} us   " + "   ".join(cells))
    finally:
        for store in stores.values():
            await testing.delete_prefix(store.client, store.options.prefix)
            await store.close()


async def main(n: int, parsers: bool) -> None:
    measure = compare_parsers if parsers else bench
    for strategy in ("lease", "stream-id", "script"):
        await measure(URL, strategy, n)
    redis86 = redis_servers.private_server_url("redis86")
    if redis86 is None:
        print("idmp      skipped: " + redis_servers.missing_server_reason("redis86"))
    else:
        await measure(redis86, "idmp", n)


if __name__ == "__main__":
    args = sys.argv[1:]
    compare = "--parsers" in args
    counts = [a for a in args if a != "--parsers"]
    asyncio.run(main(int(counts[0]) if counts else 2000, compare))
