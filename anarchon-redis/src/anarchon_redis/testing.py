"""Backdoors for tests and the conformance kit: read and age what Redis holds with plain
commands on the caller's own client, bypassing the store classes (an independent oracle).

`client` is a ``redis.asyncio.Redis`` created with ``decode_responses=True``; `prefix` is the
store's prefix option.

* `raw_run(client, prefix, job, slot)`: the lease run as stored, or None.
* `raw_claim(client, prefix, job, slot)`: a no-lease strategy's claim of the slot, or None.
* `force_expire(client, prefix, job, slot)`: set the run's ``lease_until`` to Redis' now - 1.
* `set_run_field(client, prefix, job, slot, name, value)`: change one field of a stored run.
* `floor(client, prefix, job)`: the job's forgotten floor (L11), or None.
* `delete_prefix(client, prefix)`: delete every key of a prefix (SCAN, never FLUSHALL).

These are what a harness certifying Redis with the conformance kit needs besides a server URL.
The private servers the package's own tests start (Redis 8.6, Valkey, TLS-only) are launched by
``anarchon-redis/tests/redis_servers.py``, which is not part of the wheel.
"""

from __future__ import annotations

from typing import Any

import redis.asyncio as aioredis

from anarchon.backend import RunRecord

from ._keys import JobKeys
from ._runs import run_fields, run_from_value, run_value
from ._strategies.streams import record_from_entry

__all__ = [
    "delete_prefix",
    "floor",
    "force_expire",
    "raw_claim",
    "raw_run",
    "set_run_field",
]


async def raw_run(client: aioredis.Redis, prefix: str, job: str, slot: int) -> RunRecord | None:
    keys = JobKeys(prefix, job)
    raw: Any = await client.hget(keys.runs, str(slot))
    return None if raw is None else run_from_value(raw, job, slot, keys.runs)


async def raw_claim(client: aioredis.Redis, prefix: str, job: str, slot: int) -> RunRecord | None:
    """The no-lease strategies' record of (job, slot): ``claimed``, or ``skipped`` for a skip."""
    keys = JobKeys(prefix, job)
    entries: Any = await client.xrange(keys.claims)
    for entry in entries:
        run = record_from_entry(job, entry, keys.claims)
        if run.slot == slot:
            return run
    return None


async def set_run_field(
    client: aioredis.Redis, prefix: str, job: str, slot: int, name: str, value: Any
) -> None:
    """HSET the run with one field changed (and its entry in ``:leases`` when it is the lease);
    `name` is one of `anarchon_redis._runs.FIELDS`."""
    keys = JobKeys(prefix, job)
    raw: Any = await client.hget(keys.runs, str(slot))
    if raw is None:
        raise KeyError(f"no run ({job}, {slot}) under prefix {prefix!r}")
    run = run_fields(raw, keys.runs, slot)
    if name not in run:
        raise KeyError(f"a stored run has no field {name!r}; fields: {', '.join(run)}")
    run[name] = None if value is None else str(value)
    await client.hset(keys.runs, str(slot), run_value(run))
    if name == "lease_until" and run["status"] == "running":
        await client.zadd(keys.leases, {str(slot): value})


async def force_expire(client: aioredis.Redis, prefix: str, job: str, slot: int) -> None:
    seconds, micros = await client.time()
    now = int(seconds) * 1000 + int(micros) // 1000
    await set_run_field(client, prefix, job, slot, "lease_until", now - 1)


async def floor(client: aioredis.Redis, prefix: str, job: str) -> int | None:
    value = await client.hget(JobKeys(prefix, job).runs, "floor")
    return None if value is None else int(value)


async def delete_prefix(client: aioredis.Redis, prefix: str) -> int:
    deleted = 0
    async for key in client.scan_iter(match=f"{{{prefix}:*", count=500):
        deleted += await client.delete(key)
    return deleted
