"""anarchon-redis: ``redis://`` and ``rediss://`` claim stores, four strategies.

``strategy=lease`` (default) decides L1-L11 in one Lua script on Redis TIME, with leases and
fencing; ``stream-id``, ``idmp`` (Redis 8.6+) and ``script`` are no-lease strategies on a stream
per job. Each strategy is a class in ``_strategies/``; the store classes below hold the
connection and hand claims to it. The lease and script stores also pause jobs and trigger runs
(rules P1, X1; ``_control``). `anarchon_redis.testing` holds the conformance backdoors.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from anarchon.plugins import lazy_exports

if TYPE_CHECKING:
    from ._keys import JobKeys
    from ._options import STRATEGIES, RedisOptions
    from ._store import IdmpStore, RedisLeaseStore, RedisStore, ScriptStore, StreamIdStore

__all__ = [
    "STRATEGIES",
    "IdmpStore",
    "JobKeys",
    "RedisLeaseStore",
    "RedisOptions",
    "RedisStore",
    "ScriptStore",
    "StreamIdStore",
]

# The driver is imported when a name is first used, not when the plugin registers the backend.
__getattr__ = lazy_exports(
    __name__,
    {
        "IdmpStore": "._store",
        "JobKeys": "._keys",
        "RedisLeaseStore": "._store",
        "STRATEGIES": "._options",
        "RedisOptions": "._options",
        "ScriptStore": "._store",
        "RedisStore": "._store",
        "StreamIdStore": "._store",
    },
)
