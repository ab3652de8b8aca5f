"""Registers `redis://` and `rediss://`."""

from __future__ import annotations

from anarchon import hookimpl
from anarchon.plugins import BackendRegistry

TARGET = "anarchon_redis._store:RedisStore"


@hookimpl
def anarchon_register_backends(registry: BackendRegistry) -> None:
    description = "Redis: strategy=lease (Lua, leases and fencing), stream-id, idmp or script"
    registry.add("redis", TARGET, description)
    registry.add("rediss", TARGET, description)
