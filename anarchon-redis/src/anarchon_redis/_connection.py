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
        self.read_only = False
        """Opened with `open_read_only` (R1): the store refuses claims and lease calls."""

    @property
    def client(self) -> aioredis.Redis:
        if self._client is None:
            raise RuntimeError(f"{self.name} is not open: await store.open() (or anarchon.connect)")
        return self._client

    async def open(
        self, setup: Callable[[Link], Awaitable[None]], *, read_only: bool = False
    ) -> None:
        """Connect, check the server answers, and run `setup` (the strategy's: load its scripts,
        check the server supports it; for a `read_only` open, check the prefix holds its keys);
        closed again if that fails. Nothing when open already, except that an open after a
        read-only open runs `setup` and makes the store writable."""
        if self._client is not None:
            if self.read_only and not read_only:
                with translated(self.url):
                    await setup(self)
                self.read_only = False
            return
        client = make_client(self.url, self.options)
        try:
            await ping(client, self.url)
            self._client = client
            with translated(self.url):
                await setup(self)
            self.read_only = read_only
        except BaseException:
            self._client = None
            await client.aclose()
            raise

    async def close(self) -> None:
        client, self._client = self._client, None
        self.read_only = False
        if client is not None:
            await client.aclose()

    async def now_ms(self) -> int:
        with translated(self.url):
            return await server_now_ms(self.client)
