"""Registers `redis://`, `rediss://`, `redis+cluster://`, `rediss+cluster://` and
`redis+sentinel://`."""

from __future__ import annotations

from anarchon import hookimpl
from anarchon.plugins import BackendRegistry

TARGET = "anarchon_redis._store:RedisStore"


@hookimpl
def anarchon_register_backends(registry: BackendRegistry) -> None:
    description = "Redis: strategy=lease (Lua, leases and fencing), stream-id, idmp or script"
    registry.add("redis", TARGET, description)
    registry.add("rediss", TARGET, description)
    registry.add("redis+cluster", TARGET, f"Redis Cluster; {description}")
    registry.add("rediss+cluster", TARGET, f"Redis Cluster over TLS; {description}")
    registry.add("redis+sentinel", TARGET, f"Redis via Sentinel; {description}")
