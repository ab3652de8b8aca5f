"""The fault-injecting proxy, against a small asyncio echo server that records what it got."""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterator

import pytest

from anarchon_conformance import FaultProxy


class EchoServer:
    def __init__(self) -> None:
        self.received: list[bytes] = []
        self.server: asyncio.Server | None = None
        self.port = 0

    async def _handle(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            while line := await reader.readline():
                self.received.append(line)
                writer.write(b"echo " + line)
                await writer.drain()
        except (ConnectionError, OSError):
            pass
        finally:
            writer.close()

    async def start(self) -> None:
        self.server = await asyncio.start_server(self._handle, "127.0.0.1", 0)
        self.port = self.server.sockets[0].getsockname()[1]

    async def stop(self) -> None:
        assert self.server is not None
        self.server.close()
        await self.server.wait_closed()


@pytest.fixture
async def proxy() -> AsyncIterator[tuple[EchoServer, FaultProxy]]:
    echo = EchoServer()
    await echo.start()
    async with FaultProxy("127.0.0.1", echo.port) as fault:
        yield echo, fault
    await echo.stop()


async def ask(writer: asyncio.StreamWriter, reader: asyncio.StreamReader, line: bytes) -> bytes:
    """Send a line, read the answer; a closed connection (EOF or reset) answers b""."""
    try:
        writer.write(line)
        await writer.drain()
        return await asyncio.wait_for(reader.readline(), 5)
    except ConnectionResetError:
        return b""


async def test_forwards_both_ways(proxy: tuple[EchoServer, FaultProxy]) -> None:
    echo, fault = proxy
    reader, writer = await asyncio.open_connection(*fault.address)
    assert await ask(writer, reader, b"one\n") == b"echo one\n"
    assert await ask(writer, reader, b"two\n") == b"echo two\n"
    assert echo.received == [b"one\n", b"two\n"]
    writer.close()


async def test_drop_reply_after_forwards_the_request_and_loses_the_reply(
    proxy: tuple[EchoServer, FaultProxy],
) -> None:
    echo, fault = proxy
    reader, writer = await asyncio.open_connection(*fault.address)
    assert await ask(writer, reader, b"first\n") == b"echo first\n"
    fault.drop_reply_after(2)
    assert await ask(writer, reader, b"second\n") == b"echo second\n"
    assert fault.drop_pending
    assert await ask(writer, reader, b"third\n") == b"", "the reply must be lost, then EOF"
    assert echo.received[-1] == b"third\n", "the server got the request"
    assert fault.replies_dropped == 1 and not fault.drop_pending
    writer.close()
    reader, writer = await asyncio.open_connection(*fault.address)
    assert await ask(writer, reader, b"again\n") == b"echo again\n", "new connections work"
    writer.close()


async def test_delay_replies(proxy: tuple[EchoServer, FaultProxy]) -> None:
    _, fault = proxy
    reader, writer = await asyncio.open_connection(*fault.address)
    fault.delay_replies(0.3)
    started = time.monotonic()
    assert await ask(writer, reader, b"slow\n") == b"echo slow\n"
    assert time.monotonic() - started >= 0.3
    fault.heal()
    started = time.monotonic()
    assert await ask(writer, reader, b"fast\n") == b"echo fast\n"
    assert time.monotonic() - started < 0.3
    writer.close()


async def test_refuse_and_drop_all(proxy: tuple[EchoServer, FaultProxy]) -> None:
    echo, fault = proxy
    reader, writer = await asyncio.open_connection(*fault.address)
    assert await ask(writer, reader, b"before\n") == b"echo before\n"
    fault.refuse()
    fault.drop_all()
    assert await ask(writer, reader, b"dropped?\n") == b"", "open connections are dropped"
    writer.close()
    reader, writer = await asyncio.open_connection(*fault.address)
    assert await ask(writer, reader, b"refused\n") == b"", "new connections are refused"
    writer.close()
    assert b"refused\n" not in echo.received
    fault.heal()
    reader, writer = await asyncio.open_connection(*fault.address)
    assert await ask(writer, reader, b"after\n") == b"echo after\n"
    writer.close()
