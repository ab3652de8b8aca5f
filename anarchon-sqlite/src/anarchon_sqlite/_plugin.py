"""Registers `sqlite:///path`."""

from __future__ import annotations

from anarchon import hookimpl
from anarchon.plugins import BackendRegistry


@hookimpl
def anarchon_register_backends(registry: BackendRegistry) -> None:
    registry.add(
        "sqlite",
        "anarchon_sqlite._store:SQLiteStore",
        "embedded SQLite file: BEGIN IMMEDIATE transactions, leases and fencing (one host)",
    )
