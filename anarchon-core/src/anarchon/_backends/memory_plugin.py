"""Registers the built-in `memory://` backend."""

from __future__ import annotations

from ..plugins import hookimpl
from ..plugins._registry import BackendRegistry


@hookimpl
def anarchon_register_backends(registry: BackendRegistry) -> None:
    registry.add(
        "memory",
        "anarchon._backends.memory:MemoryStore",
        "in-process reference model of the lease rules; stores with the same name share state",
    )
