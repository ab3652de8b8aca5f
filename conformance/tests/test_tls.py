"""The TLS front, against the proxy tests' echo server: TLS in front, plain bytes behind, and a
client that does not trust the CA (or has no certificate where one is required) never reaches the
server. (The PostgreSQL front, which starts TLS inside the protocol, is tested with
anarchon-postgres.)"""

from __future__ import annotations

import asyncio
import ssl
import struct
from collections.abc import AsyncIterator
from pathlib import Path

import pytest

from anarchon_conformance import CertBundle, TLSFront

from .test_proxy import EchoServer, ask

SSL_REQUEST = struct.pack("!ii", 8, 80877103)
GSSENC_REQUEST = struct.pack("!ii", 8, 80877104)


@pytest.fixture
async def echo() -> AsyncIterator[EchoServer]:
    server = EchoServer()
    await server.start()
    yield server
    await server.stop()


def test_the_bundle_is_a_ca_with_server_and_client_certificates(
    anarchon_tls_certs: CertBundle,
) -> None:
    certs = anarchon_tls_certs
    for path in (certs.ca_file, certs.server_cert_file, certs.client_cert_file):
        assert path.read_bytes().startswith(b"-----BEGIN CERTIFICATE-----")
    assert certs.server_key_file.stat().st_mode & 0o077 == 0, "keys are private"
    context = certs.client_context(with_cert=True)
    assert context.verify_mode is ssl.CERT_REQUIRED and context.check_hostname


async def test_tls_in_front_plain_behind(echo: EchoServer, anarchon_tls_certs: CertBundle) -> None:
    async with TLSFront("127.0.0.1", echo.port, anarchon_tls_certs) as front:
        for host in ("127.0.0.1", "localhost"):
            reader, writer = await asyncio.open_connection(
                "127.0.0.1",
                front.port,
                ssl=anarchon_tls_certs.client_context(),
                server_hostname=host,
            )
            assert await ask(writer, reader, b"hello\n") == b"echo hello\n"
            writer.close()
            await writer.wait_closed()
        assert front.handshakes == 2
    assert echo.received == [b"hello\n", b"hello\n"], "the server got plain bytes"


async def test_a_client_that_does_not_trust_the_ca_never_reaches_the_server(
    echo: EchoServer, anarchon_tls_certs: CertBundle, tmp_path: Path
) -> None:
    stranger = CertBundle.create(tmp_path)
    async with TLSFront("127.0.0.1", echo.port, anarchon_tls_certs) as front:
        with pytest.raises(ssl.SSLCertVerificationError):
            await asyncio.open_connection(
                "127.0.0.1", front.port, ssl=stranger.client_context(), server_hostname="127.0.0.1"
            )
        assert front.handshakes == 0
    assert echo.received == []


async def test_verify_clients_requires_a_client_certificate(
    echo: EchoServer, anarchon_tls_certs: CertBundle
) -> None:
    certs = anarchon_tls_certs
    async with TLSFront("127.0.0.1", echo.port, certs, verify_clients=True) as front:
        reader, writer = await asyncio.open_connection(
            "127.0.0.1", front.port, ssl=certs.client_context(), server_hostname="127.0.0.1"
        )
        # TLS 1.3: the client's handshake ends before the server has checked it; the refusal
        # comes at the first read, as an alert or as the end of the connection.
        try:
            answer = await ask(writer, reader, b"anonymous\n")
        except ssl.SSLError:
            answer = b""
        assert answer == b""
        writer.close()
        reader, writer = await asyncio.open_connection(
            "127.0.0.1",
            front.port,
            ssl=certs.client_context(with_cert=True),
            server_hostname="127.0.0.1",
        )
        assert await ask(writer, reader, b"known\n") == b"echo known\n"
        writer.close()
        await writer.wait_closed()
        assert front.handshakes == 1
    assert echo.received == [b"known\n"]
