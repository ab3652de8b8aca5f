"""Registers `amqp://` and `amqps://`."""

from __future__ import annotations

from anarchon import hookimpl
from anarchon.plugins import BackendRegistry

TARGET = "anarchon_rabbitmq._store:RabbitMQStore"


@hookimpl
def anarchon_register_backends(registry: BackendRegistry) -> None:
    description = "RabbitMQ: publish to a max-length-1 classic queue with confirms (no leases)"
    registry.add("amqp", TARGET, description)
    registry.add("amqps", TARGET, description)
