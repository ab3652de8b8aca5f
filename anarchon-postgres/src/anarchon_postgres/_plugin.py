"""Registers `postgresql://` and `postgres://`."""

from __future__ import annotations

from anarchon import hookimpl
from anarchon.plugins import BackendRegistry

TARGET = "anarchon_postgres._store:PostgresStore"


@hookimpl
def anarchon_register_backends(registry: BackendRegistry) -> None:
    description = "PostgreSQL: one-round-trip claim function, row lock per job, leases and fencing"
    registry.add("postgresql", TARGET, description)
    registry.add("postgres", TARGET, description)
