"""`RuntimeContext`: what every layer of a running scheduler shares, passed as one value."""

from __future__ import annotations

import attrs

from ..abc import ClaimStore, LeaseStore
from ..plugins import PluginManager
from .clock import StoreClock
from .store_health import StoreHealth

__all__ = ["RuntimeContext"]


def _lease_store(context: RuntimeContext) -> LeaseStore | None:
    return context.store if isinstance(context.store, LeaseStore) else None


@attrs.frozen(kw_only=True)
class RuntimeContext:
    """The store, its corrected clock, its health, the observers and this instance's id, for
    the scheduler, its dispatcher, the claimer and each execution (and for `once()`)."""

    store: ClaimStore
    clock: StoreClock
    """The local clock corrected to the store's (T2)."""
    health: StoreHealth
    events: PluginManager
    instance: str
    lease_store: LeaseStore | None = attrs.field(
        init=False, default=attrs.Factory(_lease_store, takes_self=True)
    )
    """The store, if it keeps leases (heartbeats, takeovers, release); None otherwise."""

    @property
    def store_name(self) -> str:
        """The store's URL, redacted, for logs and events."""
        return self.health.store_name
