"""What a prefix holds, read with ``SCAN``: the job list (`anarchon.abc.SupportsJobList`) and the
check of a read-only open (`anarchon.abc.SupportsReadOnly`, rule R1).

Why SCAN and not a registry of jobs. A set of job names per prefix would have to be written by
the claims: inside the claim script it is a key outside the job's hash slot ``{prefix:job}``
(Redis Cluster refuses such a script), outside it an extra write per claim, or per job and
process (which misses a job whose keys were flushed and written again). Listing the keys
instead writes nothing on the claim path, so a claim costs what it cost before; it needs only
read rights (``SCAN`` is in ``@read``), so a monitoring user can list the jobs; and it lists
exactly the jobs whose runs Redis holds now, after a flush or a restore too. In a Redis
Cluster the walk goes node by node over the primaries (redis-py's ``RedisCluster.scan_iter``). The price is a walk over
the database's keys on each call (``SCAN ... COUNT 1000``: about a thousand keys per round trip),
paid by ``anarchon status`` and the dashboard, not by schedulers: where the database holds
millions of other keys, name the jobs (``status --job``) or give anarchon its own database.

Job names and prefixes are letters, digits, ``_`` and ``-`` (`anarchon.check_name`), so a key
``{prefix:job}:<kind>`` names its job unambiguously, and a key under the prefix that does not
parse is not anarchon's (it is left out).
"""

from __future__ import annotations

import redis.asyncio as aioredis

from anarchon import check_name
from anarchon.backend import ConfigError

__all__ = ["KINDS", "SCAN_COUNT", "job_names", "kinds_under"]

SCAN_COUNT = 1000
"""Keys Redis looks at per SCAN call."""

KINDS: dict[str, tuple[str, ...]] = {
    "runs": ("lease",),
    "slots": ("lease",),
    "leases": ("lease",),
    "events": ("lease",),
    "claims": ("stream-id", "idmp", "script"),
    "idmp-config": ("idmp",),
}
"""The last part of each key anarchon writes (`JobKeys`) -> the strategies that write it."""


def _glob(text: str) -> str:
    """`text` as a literal in a SCAN MATCH pattern (names never hold these characters; this
    keeps the pattern right should they ever)."""
    return "".join("\\" + c if c in "*?[]\\^" else c for c in text)


def _job_of(key: str, prefix: str, kind: str) -> str | None:
    """The job of ``{prefix:job}:<kind>``, or None for a key of another shape."""
    head, tail = f"{{{prefix}:", f"}}:{kind}"
    if not (key.startswith(head) and key.endswith(tail)):
        return None
    try:
        return check_name(key[len(head) : -len(tail)])
    except ConfigError:
        return None


async def job_names(client: aioredis.Redis, prefix: str, kind: str) -> list[str]:
    """The jobs that have a key ``{prefix:job}:<kind>``, sorted (SCAN may repeat a key)."""
    found: set[str] = set()
    async for key in client.scan_iter(match=f"{{{_glob(prefix)}:*}}:{kind}", count=SCAN_COUNT):
        job = _job_of(key, prefix, kind)
        if job is not None:
            found.add(job)
    return sorted(found)


async def kinds_under(client: aioredis.Redis, prefix: str, wanted: str) -> dict[str, str]:
    """The kinds of anarchon key (`KINDS`) under `prefix`, each with one key of that kind: the
    walk stops at the first key of the `wanted` kind, so an open of a prefix in use is quick."""
    seen: dict[str, str] = {}
    # scan_iter: a cluster client walks node by node (a cluster's SCAN cursor is per node).
    async for key in client.scan_iter(match=f"{{{_glob(prefix)}:*", count=SCAN_COUNT):
        kind = key.rpartition("}:")[2]
        if kind in KINDS and _job_of(key, prefix, kind) is not None:
            seen.setdefault(kind, key)
            if kind == wanted:
                break
    return seen
