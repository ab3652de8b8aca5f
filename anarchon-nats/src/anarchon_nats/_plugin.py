"""Registers `nats://` and `tls://`."""

from __future__ import annotations

from anarchon import hookimpl
from anarchon.plugins import BackendRegistry

TARGET = "anarchon_nats._store:NATSStore"


@hookimpl
def anarchon_register_backends(registry: BackendRegistry) -> None:
    description = "NATS JetStream: de-duplicated publish (Nats-Msg-Id) or expected-seq (no leases)"
    registry.add("nats", TARGET, description)
    registry.add("tls", TARGET, description)
