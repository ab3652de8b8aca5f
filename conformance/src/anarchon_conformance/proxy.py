"""A fault-injecting TCP proxy: forwards bytes between clients and a server, and on command
loses a reply, delays replies, drops every connection or refuses new ones.

Used by the C2 check ("lost reply, retried claim, one run") and the reconnect and outage checks;
usable on its own::

    async with FaultProxy("127.0.0.1", 3306) as proxy:
        store = await anarchon.connect(f"mysql://root@127.0.0.1:{proxy.port}/test")
        proxy.drop_reply_after(1)   # the next request reaches the server, its reply is lost
"""

from __future__ import annotations

import asyncio
import contextlib
import ssl
from types import TracebackType

import attrs
from typing_extensions import Self

__all__ = ["FaultProxy"]

_CHUNK = 65536


@attrs.define(eq=False)
class _Link:
    client: asyncio.StreamWriter
    server: asyncio.StreamWriter
    doomed: bool = False
    """A request was forwarded under `drop_reply_after`: lose its reply and close."""
    tasks: list[asyncio.Task[None]] = attrs.Factory(list)

    def close(self) -> None:
        for writer in (self.client, self.server):
            with contextlib.suppress(Exception):
                writer.close()


class FaultProxy:
    """Listens on ``127.0.0.1:<port>`` and forwards every connection to ``target``."""

    def __init__(
        self, target_host: str, target_port: int, *, host: str = "127.0.0.1", port: int = 0
    ) -> None:
        self.target = (target_host, target_port)
        self.host = host
        self.port = port
        self._server: asyncio.Server | None = None
        self._links: set[_Link] = set()
        self._drop_in: int | None = None
        self._delay_s = 0.0
        self._refusing = False
        self.connections_accepted = 0
        self.replies_dropped = 0

    @property
    def address(self) -> tuple[str, int]:
        return (self.host, self.port)

    # -- commands -------------------------------------------------------------------------------
    def drop_reply_after(self, requests: int = 1) -> None:
        """Forward the next `requests` client writes (counted over all connections); the last one
        reaches the server, but its reply is discarded and that connection closed: a request the
        server took whose answer the client never saw."""
        if requests < 1:
            raise ValueError("requests must be >= 1")
        self._drop_in = requests

    @property
    def drop_pending(self) -> bool:
        """True while a `drop_reply_after` has not fired yet."""
        return self._drop_in is not None

    def delay_replies(self, seconds: float) -> None:
        """Hold every server reply for `seconds` before forwarding it (0 turns it off)."""
        self._delay_s = seconds

    def refuse(self, refusing: bool = True) -> None:
        """Accept new connections and close them at once (an outage), or stop doing so."""
        self._refusing = refusing

    def drop_all(self) -> None:
        """Close every open connection, as a restarting server does."""
        for link in list(self._links):
            link.close()

    def heal(self) -> None:
        """Turn every fault off."""
        self._drop_in = None
        self._delay_s = 0.0
        self._refusing = False

    # -- running --------------------------------------------------------------------------------
    async def start(self) -> Self:
        self._server = await asyncio.start_server(
            self._accept, self.host, self.port, ssl=self._listener_tls()
        )
        self.port = self._server.sockets[0].getsockname()[1]
        return self

    async def stop(self) -> None:
        if self._server is not None:
            self._server.close()
            self.drop_all()
            tasks = [t for link in self._links for t in link.tasks]
            for task in tasks:
                task.cancel()
            await asyncio.gather(*tasks, return_exceptions=True)
            await self._server.wait_closed()
            self._server = None

    async def __aenter__(self) -> Self:
        return await self.start()

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        await self.stop()

    async def _accept(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self.connections_accepted += 1
        if self._refusing:
            writer.close()
            return
        opened = await self._opened(reader, writer)
        if opened is None:
            writer.close()
            return
        reader, writer = opened
        try:
            s_reader, s_writer = await asyncio.open_connection(*self.target)
        except OSError:
            writer.close()
            return
        link = _Link(client=writer, server=s_writer)
        self._links.add(link)
        link.tasks = [
            asyncio.create_task(self._upstream(link, reader)),
            asyncio.create_task(self._downstream(link, s_reader)),
        ]
        try:
            await asyncio.gather(*link.tasks, return_exceptions=True)
        finally:
            link.close()
            self._links.discard(link)

    # -- what a subclass changes (`anarchon_conformance.tls`) ------------------------------------
    def _listener_tls(self) -> ssl.SSLContext | None:
        """TLS that the listener itself terminates before `_accept`; none here."""
        return None

    async def _opened(
        self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter
    ) -> tuple[asyncio.StreamReader, asyncio.StreamWriter] | None:
        """The client's streams once its bytes may be forwarded (here at once), or None to
        close the connection."""
        return reader, writer

    async def _upstream(self, link: _Link, reader: asyncio.StreamReader) -> None:
        try:
            while data := await reader.read(_CHUNK):
                if self._drop_in is not None:
                    self._drop_in -= 1
                    if self._drop_in == 0:
                        self._drop_in = None
                        link.doomed = True
                link.server.write(data)
                await link.server.drain()
                if link.doomed:
                    # The server may never answer (a partial request): close after a while.
                    asyncio.get_running_loop().call_later(5.0, link.close)
                    return
        except (OSError, asyncio.IncompleteReadError):
            pass
        finally:
            if not link.doomed:
                link.close()

    async def _downstream(self, link: _Link, reader: asyncio.StreamReader) -> None:
        try:
            while data := await reader.read(_CHUNK):
                if link.doomed:
                    self.replies_dropped += 1
                    return
                if self._delay_s:
                    await asyncio.sleep(self._delay_s)
                link.client.write(data)
                await link.client.drain()
        except (OSError, asyncio.IncompleteReadError):
            pass
        finally:
            link.close()
