"""``sslmode`` through a PostgreSQL TLS front (`tls_front.PostgresTLSFront`: it answers libpq's
SSLRequest, then terminates TLS) in front of the test server, with a private CA made for this
test session: schema creation, claims, renew and finish over ``verify-full``; a server
certificate from another CA, and ``sslmode=require`` against the plain server, are clear errors
without the password. First, the front itself, against an echo server: it negotiates TLS the way
libpq asks for it."""

from __future__ import annotations

import asyncio
import struct
from collections.abc import AsyncIterator
from pathlib import Path
from urllib.parse import urlsplit, urlunsplit

import pytest

import anarchon
from anarchon import ClaimRequest, LeaseStore, Outcome, RunStatus, StoreUnavailable, new_token
from anarchon_conformance.tls import CertBundle
from anarchon_postgres import testing

from .conftest import POSTGRES_URL, url_with
from .tls_front import GSSENC_REQUEST, SSL_REQUEST, PostgresTLSFront

PASSWORD = "s3cret-do-not-show"


def via(port: int, *, password: str | None = None) -> str:
    """POSTGRES_URL on another local port, optionally with a password."""
    parts = urlsplit(POSTGRES_URL)
    user = parts.username or "postgres"
    auth = f"{user}:{password}@" if password else f"{user}@"
    return urlunsplit(parts._replace(netloc=f"{auth}127.0.0.1:{port}"))


class EchoServer:
    """Answers each line with ``echo <line>`` and keeps what it got: plain bytes behind the front."""

    def __init__(self) -> None:
        self.received: list[bytes] = []
        self.port = 0

    async def _handle(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            while line := await reader.readline():
                self.received.append(line)
                writer.write(b"echo " + line)
                await writer.drain()
        except OSError:
            pass
        finally:
            writer.close()


@pytest.fixture
async def echo() -> AsyncIterator[EchoServer]:
    server = EchoServer()
    listener = await asyncio.start_server(server._handle, "127.0.0.1", 0)
    server.port = listener.sockets[0].getsockname()[1]
    yield server
    listener.close()
    await listener.wait_closed()


async def ask(writer: asyncio.StreamWriter, reader: asyncio.StreamReader, line: bytes) -> bytes:
    writer.write(line)
    await writer.drain()
    return await asyncio.wait_for(reader.readline(), 5)


async def postgres_tls(port: int, certs: CertBundle, *, gssenc_first: bool) -> bytes:
    """What libpq does: ask for TLS in plain text, then upgrade; the answers to the requests."""
    reader, writer = await asyncio.open_connection("127.0.0.1", port)
    answers = b""
    if gssenc_first:
        writer.write(struct.pack("!ii", 8, GSSENC_REQUEST))
        answers += await asyncio.wait_for(reader.readexactly(1), 5)
    writer.write(struct.pack("!ii", 8, SSL_REQUEST))
    answers += await asyncio.wait_for(reader.readexactly(1), 5)
    await writer.start_tls(certs.client_context(), server_hostname="127.0.0.1")
    assert await ask(writer, reader, b"startup\n") == b"echo startup\n"
    writer.close()
    await writer.wait_closed()
    return answers


@pytest.mark.parametrize("gssenc_first", [False, True], ids=["SSLRequest", "GSSENCRequest first"])
async def test_the_front_answers_the_ssl_request_then_does_tls(
    echo: EchoServer, anarchon_tls_certs: CertBundle, gssenc_first: bool
) -> None:
    async with PostgresTLSFront("127.0.0.1", echo.port, anarchon_tls_certs) as front:
        answers = await postgres_tls(front.port, anarchon_tls_certs, gssenc_first=gssenc_first)
        assert answers == (b"NS" if gssenc_first else b"S")
        assert front.handshakes == 1
    assert echo.received == [b"startup\n"], "the server behind got plain bytes"


async def test_the_front_hangs_up_on_a_plain_startup(
    echo: EchoServer, anarchon_tls_certs: CertBundle
) -> None:
    async with PostgresTLSFront("127.0.0.1", echo.port, anarchon_tls_certs) as front:
        reader, writer = await asyncio.open_connection("127.0.0.1", front.port)
        writer.write(struct.pack("!ii", 9, 196608) + b"\n")  # a StartupMessage, no TLS asked
        assert await asyncio.wait_for(reader.read(), 5) == b""
        writer.close()
        assert front.handshakes == 0
    assert echo.received == []


@pytest.fixture
async def front(schema: str, anarchon_tls_certs: CertBundle) -> AsyncIterator[PostgresTLSFront]:
    parts = urlsplit(POSTGRES_URL)
    target = (parts.hostname or "127.0.0.1", parts.port or 5432)
    async with PostgresTLSFront(*target, anarchon_tls_certs) as started:
        yield started


async def test_claims_over_verify_full(
    front: PostgresTLSFront, schema: str, anarchon_tls_certs: CertBundle
) -> None:
    ca = anarchon_tls_certs.ca_file
    url = url_with(schema, via(front.port), sslmode="verify-full", sslrootcert=ca)
    async with anarchon.connect(url) as first, anarchon.connect(url) as second:
        assert isinstance(first, LeaseStore) and isinstance(second, LeaseStore)
        slot = await first.now_ms() // 1000 * 1000
        mine = ClaimRequest(job="report", slot=slot, instance="a", token=new_token())
        won = await first.claim(mine)
        assert won.outcome is Outcome.WON and won.attempt == 1
        other = ClaimRequest(job="report", slot=slot, instance="b")
        assert (await second.claim(other)).outcome is Outcome.RUNNING
        assert await first.renew("report", slot, mine.token, 60_000)
        assert await first.finish("report", slot, mine.token, RunStatus.SUCCEEDED)
        assert (await second.claim(other)).outcome is Outcome.DONE
    assert front.handshakes >= 2, "both stores came through the TLS front"
    stored = testing.raw_run(POSTGRES_URL, schema, "anarchon_runs", "cron", "report", slot)
    assert stored is not None and stored.status is RunStatus.SUCCEEDED
    assert stored.token == mine.token


async def test_mutual_tls_presents_the_client_certificate(
    schema: str, anarchon_tls_certs: CertBundle
) -> None:
    """The front stands for a server with ``clientcert=verify-full`` in pg_hba.conf: it requires
    a certificate of the CA, so only a store that passes ``sslcert`` and ``sslkey`` on to libpq
    gets through."""
    certs = anarchon_tls_certs
    parts = urlsplit(POSTGRES_URL)
    target = (parts.hostname or "127.0.0.1", parts.port or 5432)
    async with PostgresTLSFront(*target, certs, verify_clients=True) as front:
        url = url_with(schema, via(front.port), sslmode="verify-full", sslrootcert=certs.ca_file)
        client = f"{url}&sslcert={certs.client_cert_file}&sslkey={certs.client_key_file}"
        async with anarchon.connect(client) as store:
            slot = await store.now_ms() // 1000 * 1000
            claim = ClaimRequest(job="report", slot=slot, instance="a")
            assert (await store.claim(claim)).outcome is Outcome.WON
        assert front.handshakes >= 1
        with pytest.raises(StoreUnavailable) as refused:
            await anarchon.connect(url)
        assert f"127.0.0.1:{front.port}" in str(refused.value)


async def test_a_server_certificate_from_another_ca_is_a_clear_error(
    front: PostgresTLSFront, schema: str, tmp_path: Path
) -> None:
    stranger = CertBundle.create(tmp_path).ca_file
    url = url_with(
        schema, via(front.port, password=PASSWORD), sslmode="verify-full", sslrootcert=stranger
    )
    with pytest.raises(StoreUnavailable) as refused:
        await anarchon.connect(url, connect_timeout="5")
    message = str(refused.value)
    assert f"127.0.0.1:{front.port}" in message and PASSWORD not in message, message
    assert "certificate verify failed" in message and "sslmode" in message, message
    assert front.handshakes == 0


async def test_sslmode_require_against_a_server_without_tls_is_a_clear_error(schema: str) -> None:
    parts = urlsplit(POSTGRES_URL)
    url = url_with(schema, via(parts.port or 5432, password=PASSWORD), sslmode="require")
    with pytest.raises(StoreUnavailable) as refused:
        await anarchon.connect(url, connect_timeout="5")
    message = str(refused.value)
    assert "server does not support SSL" in message and "sslmode" in message, message
    assert PASSWORD not in message
