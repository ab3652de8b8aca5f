"""Opening a scheduler's store: at start, retried up to ``start_timeout`` (or one bounded try
for a degraded start), and in the background after a degraded start, until it answers."""

from __future__ import annotations

import asyncio
import logging
import time

from .._errors import ConfigError, StoreUnavailable
from .._urls import redact
from ..abc import ClaimStore
from .context import RuntimeContext

__all__ = ["MAX_CONNECT_DELAY_S", "open_store", "open_when_it_answers"]

log = logging.getLogger("anarchon.scheduler")

MAX_CONNECT_DELAY_S = 5.0
"""A degraded scheduler retries opening its store at least this often."""


async def open_store(
    store: ClaimStore, store_name: str, *, start_timeout_ms: int, first_only: bool = False
) -> None:
    """Open the store, retrying up to ``start_timeout``; with `first_only`, one bounded try."""
    deadline = time.monotonic() + start_timeout_ms / 1000
    delay = 0.1
    while True:
        try:
            await asyncio.wait_for(store.open(), start_timeout_ms / 1000)
            return
        except (StoreUnavailable, asyncio.TimeoutError, TimeoutError) as exc:
            if first_only:
                raise StoreUnavailable(str(exc) or "timed out") from None
            if time.monotonic() + delay > deadline:
                raise StoreUnavailable(
                    f"store {store_name} did not answer within "
                    f"{start_timeout_ms} ms: {exc}. Check that it runs and the URL "
                    "is right, or raise start_timeout"
                ) from None
            await asyncio.sleep(delay)
            delay = min(delay * 2, 2.0)


async def open_when_it_answers(
    context: RuntimeContext, stop: asyncio.Event, *, timeout_s: float
) -> bool:
    """After a degraded start: open the store with backoff until it answers (True), `stop` is
    set or the store refuses for good (`ConfigError`, logged: the instance stays not ready)."""
    store, health, instance = context.store, context.health, context.instance
    delay = 0.2
    while not stop.is_set():
        try:
            await asyncio.wait_for(stop.wait(), delay)
            return False
        except asyncio.TimeoutError:
            pass
        delay = min(delay * 2, MAX_CONNECT_DELAY_S)
        try:
            await asyncio.wait_for(store.open(), timeout_s)
        except (StoreUnavailable, asyncio.TimeoutError, TimeoutError, ConnectionError) as exc:
            health.failed("open", exc)
            continue
        except ConfigError as exc:
            health.last_error = redact(str(exc))
            log.error(
                "scheduler %s cannot use store %s: %s; it stays not ready (fix the setting "
                "and restart)",
                instance,
                context.store_name,
                health.last_error,
                extra={"instance": instance, "store": context.store_name},
            )
            return False
        health.ok()
        return True
    return False
