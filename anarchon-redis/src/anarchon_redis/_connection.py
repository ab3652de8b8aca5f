"""`Link`: what a store hands its strategy with each call instead of itself (the NATS backend's
shape too). The client while the store is open, and the URL that errors name. The store opens
and closes it; strategies only use it."""

from __future__ import annotations

from collections.abc import Awaitable, Callable

import redis.asyncio as aioredis

from anarchon.backend import StoreURL

from ._client import make_client, ping, server_now_ms, translated
from ._options import RedisOptions

__all__ = ["Link"]


class Link:
    """The connection of one store to Redis. `name` is how "not open" errors name the store."""

    def __init__(self, url: StoreURL, options: RedisOptions, name: str) -> None:
        self.url = url
        self.options = options
        self.name = name
        self._client: aioredis.Redis | None = None

    @property
    def client(self) -> aioredis.Redis:
        if self._client is None:
            raise RuntimeError(f"{self.name} is not open: await store.open() (or anarchon.connect)")
        return self._client

    async def open(self, setup: Callable[[Link], Awaitable[None]]) -> None:
        """Connect, check the server answers, and run `setup` (the strategy's: load its scripts,
        check the server supports it); closed again if that fails. Nothing when open already."""
        if self._client is not None:
            return
        client = make_client(self.url, self.options)
        try:
            await ping(client, self.url)
            self._client = client
            with translated(self.url):
                await setup(self)
        except BaseException:
            self._client = None
            await client.aclose()
            raise

    async def close(self) -> None:
        client, self._client = self._client, None
        if client is not None:
            await client.aclose()

    async def now_ms(self) -> int:
        with translated(self.url):
            return await server_now_ms(self.client)
