"""`Link`: what a store hands its strategy with each call instead of itself (the NATS backend's
shape too). The client while the store is open, and the URL that errors name. The store opens
and closes it; strategies only use it."""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import Any

import redis.asyncio as aioredis
import redis.exceptions as rex

from anarchon.backend import StoreURL
from anarchon.plugins import plugin_manager

from ._client import make_client, ping, server_now_ms, translated
from ._durability import Confirm, check_server, confirm_for
from ._options import RedisOptions
from ._server import ServerWatch, judge, log, read_persistence

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
        self.confirm: Confirm | None = confirm_for(options)
        """Durability options: what follows each deciding write (`_durability`)."""
        self.watch = ServerWatch(url, options)
        """The server's persistence and run id (`_server`)."""

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
        pool: Any = client.connection_pool
        make = pool.make_connection
        watch = self.watch

        def made() -> Any:  # every new connection (a reconnect too) makes the run id due
            connection = make()
            connection.register_connect_callback(watch.connected)
            return connection

        pool.make_connection = made
        try:
            await ping(client, self.url)
            self._client = client
            with translated(self.url):
                await setup(self)
                if not read_only:
                    await self._check_server(client)
            self.read_only = read_only
        except BaseException:
            self._client = None
            await client.aclose()
            raise

    async def _check_server(self, client: aioredis.Redis) -> None:
        """At open: persistence (warn, or refuse with ``require_persistence``), durability
        options the server can serve, and the run id that later reads compare with."""
        self.watch.persistence = found = await read_persistence(client)
        judge(self.url, self.options, found)
        if self.options.waits:
            for text in await check_server(client, self.url, self.options):
                log.warning("%s", text, extra={"store": str(self.url)})
        try:
            await self.watch.read(client)
        except rex.ResponseError as exc:  # NOPERM: an ACL without +info
            self.watch.every_s = float("inf")
            log.warning(
                "Redis at %s refused INFO server (%s): a restart of the server will not be "
                "noticed; grant the user +info",
                self.url,
                str(exc)[:120],
                extra={"store": str(self.url)},
            )

    async def watch_server(self) -> None:
        """Read the server's run id when due (every `restart_check_ms`, and after a failure):
        a restart is logged once and told to observers (`_server`). A failure here is left to
        the call that follows."""
        if self._client is None or not self.watch.due():
            return
        try:
            restarted = await self.watch.read(self._client)
        except (
            rex.RedisError,
            OSError,
        ):  # the claim that follows meets the same failure and reports it
            self.watch.failed()
            return
        if restarted is not None:
            plugin_manager().store_error(
                store=str(self.url), operation="server_restart", error=restarted
            )

    async def close(self) -> None:
        client, self._client = self._client, None
        self.read_only = False
        if client is not None:
            await client.aclose()

    async def now_ms(self) -> int:
        with translated(self.url):
            return await server_now_ms(self.client)
