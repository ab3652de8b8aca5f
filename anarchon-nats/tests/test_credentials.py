"""Credentials never appear in errors, logs or reprs: a private server that requires a login."""

from __future__ import annotations

import asyncio
import logging
import socket
import struct
import time
from collections.abc import AsyncIterator
from pathlib import Path

import pytest

import anarchon
from anarchon import ClaimRequest, StoreUnavailable
from anarchon_nats import NATSStore
from anarchon_nats._connection import ConnectErrors

from .conftest import PrivateServer, require_binary

PASSWORD = "s3cr3t-Pa55word"


@pytest.fixture
def auth_server(tmp_path: Path) -> PrivateServer:
    require_binary()
    server = PrivateServer(tmp_path, "--user", "app", "--pass", PASSWORD)
    server.start()
    yield server  # type: ignore[misc]
    server.stop()


async def test_login_with_user_and_password(auth_server: PrivateServer) -> None:
    url = f"nats://app:{PASSWORD}@127.0.0.1:{auth_server.port}"
    async with anarchon.connect(url) as store:
        assert PASSWORD not in repr(store) and PASSWORD not in str(store.url)
        claim = await store.claim(
            ClaimRequest(job="job", slot=time.time_ns() // 1_000_000, instance="i")
        )
        assert claim.won


@pytest.mark.parametrize("wrong", ["wrong-Pa55word", PASSWORD[:-1]])
async def test_wrong_password_error_hides_it(
    auth_server: PrivateServer, wrong: str, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.DEBUG)
    store = NATSStore.create(f"nats://app:{wrong}@127.0.0.1:{auth_server.port}")
    with pytest.raises(StoreUnavailable) as info:
        await store.open()
    message = str(info.value)
    assert "app:***@" in message and "Authorization" in message, message
    assert "refused the login" in message, message
    for text in (message, repr(info.value), caplog.text, repr(store)):
        assert wrong not in text and PASSWORD not in text


def test_refused_login_outranks_the_reset_that_follows_it() -> None:
    """After its -ERR the server hangs up; closing that socket may then report a reset."""
    import nats.errors

    errors = ConnectErrors((PASSWORD,))
    refusal = nats.errors.Error("nats: 'Authorization Violation'")
    for exc in (refusal, refusal, ConnectionResetError(104, "Connection reset by peer")):
        errors.add(exc)
    reason, refused = errors.reason(nats.errors.NoServersError())
    assert refused and "Authorization Violation" in reason

    errors.clear()
    errors.add(ConnectionRefusedError(111, f"Connect call failed {PASSWORD}"))
    reason, refused = errors.reason(nats.errors.NoServersError())
    assert not refused and "ConnectionRefusedError" in reason and PASSWORD not in reason


@pytest.fixture
async def resetting_server() -> AsyncIterator[int]:
    """A fake NATS server that refuses every login the way nats-server may: ``-ERR``, then a
    reset of the connection (forced here with ``SO_LINGER`` 0, not left to chance)."""

    async def refuse(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        writer.write(b'INFO {"server_id":"fake","version":"2.9.10","proto":1,')
        writer.write(b'"auth_required":true,"max_payload":1048576}\r\n')
        await writer.drain()
        await reader.readline()  # CONNECT
        writer.write(b"-ERR 'Authorization Violation'\r\n")
        await writer.drain()
        sock = writer.get_extra_info("socket")
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
        writer.close()

    server = await asyncio.start_server(refuse, "127.0.0.1", 0)
    yield server.sockets[0].getsockname()[1]
    server.close()
    await server.wait_closed()


async def test_refused_login_is_reported_despite_a_reset(
    resetting_server: int, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.DEBUG, logger="anarchon.nats")
    store = NATSStore.create(f"nats://app:{PASSWORD}@127.0.0.1:{resetting_server}")
    with pytest.raises(StoreUnavailable) as info:
        await store.open()
    message = str(info.value)
    assert "refused the login" in message and "Authorization Violation" in message, message
    assert "app:***@" in message and PASSWORD not in message and PASSWORD not in caplog.text


async def test_token_is_hidden(auth_server: PrivateServer) -> None:
    store = NATSStore.create(f"nats://{PASSWORD}@127.0.0.1:{auth_server.port}")
    assert "***@" in repr(store)
    with pytest.raises(StoreUnavailable) as info:
        await store.open()
    assert PASSWORD not in str(info.value) and PASSWORD not in repr(store)
