"""anarchon-rabbitmq: the RabbitMQ backend, ``amqp://user:pass@host:5672/vhost`` (and ``amqps://``).

Each run is a durable classic queue ``<prefix>.<job>.slot.<slot>`` holding at most one message;
the claim whose publish the broker confirms wins, the others are refused (nack: `lost`). No
leases, no self-recognition: an answer lost with the connection is `unknown`, never `won` (C3).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from anarchon.plugins import lazy_exports

if TYPE_CHECKING:
    from ._options import DEFAULT_SLOT_TTL_MS, RabbitMQOptions
    from ._queues import queue_arguments, queue_name
    from ._store import RabbitMQStore

__all__ = [
    "DEFAULT_SLOT_TTL_MS",
    "RabbitMQOptions",
    "RabbitMQStore",
    "queue_arguments",
    "queue_name",
]

# The driver is imported when a name is first used, not when the plugin registers the backend.
__getattr__ = lazy_exports(
    __name__,
    {
        "DEFAULT_SLOT_TTL_MS": "._options",
        "RabbitMQOptions": "._options",
        "queue_arguments": "._queues",
        "queue_name": "._queues",
        "RabbitMQStore": "._store",
    },
)
