"""anarchon-nats: the NATS JetStream backend, ``nats://host:4222`` or ``tls://host:4222``.

Each claim is one JetStream publish that only the first instance can store: de-duplicated by
``Nats-Msg-Id: <job>:<slot>`` (``strategy=msg-id``, the default) or guarded by
``Nats-Expected-Last-Subject-Sequence: 0`` on the slot's own subject (``strategy=expected-seq``).
No leases; a resent claim is recognised by its token (C2).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from anarchon.plugins import lazy_exports

if TYPE_CHECKING:
    from ._options import DEFAULT_DUPLICATE_WINDOW_MS, DEFAULT_MAX_AGE_MS, STRATEGIES, NATSOptions
    from ._store import NATSStore

__all__ = [
    "DEFAULT_DUPLICATE_WINDOW_MS",
    "DEFAULT_MAX_AGE_MS",
    "STRATEGIES",
    "NATSOptions",
    "NATSStore",
]

# The driver is imported when a name is first used, not when the plugin registers the backend.
__getattr__ = lazy_exports(
    __name__,
    {
        "DEFAULT_DUPLICATE_WINDOW_MS": "._options",
        "DEFAULT_MAX_AGE_MS": "._options",
        "STRATEGIES": "._options",
        "NATSOptions": "._options",
        "NATSStore": "._store",
    },
)
