"""Registers ``mariadb://`` (the entry point in pyproject.toml names this module)."""

from __future__ import annotations

from anarchon import hookimpl
from anarchon.plugins import BackendRegistry


@hookimpl
def anarchon_register_backends(registry: BackendRegistry) -> None:
    registry.add(
        "mariadb",
        "anarchon_mariadb._store:MariaDBStore",
        "MariaDB / MySQL: one transaction with a per-job row lock, leases and fencing (example)",
    )
