"""``rediss://`` against private TLS-only ``redis-server`` processes (``--port 0``, so nothing
works without TLS) whose certificates come from a private CA made for this test session
(`anarchon_conformance.tls`): lease and stream-id claims, mutual TLS, and the errors of a
certificate that is refused, which name the server and what to set, never the password."""

from __future__ import annotations

import asyncio
import socket
import struct
from collections.abc import AsyncIterator, Iterator
from pathlib import Path
from typing import Any

import pytest
import redis.asyncio as aioredis

import anarchon
from anarchon import (
    ClaimRequest,
    ConfigError,
    LeaseStore,
    Outcome,
    RunStatus,
    StoreUnavailable,
    new_token,
)
from anarchon_conformance.tls import CertBundle
from anarchon_redis import testing

from .redis_servers import NoTLS, PrivateServer, TLSFiles, start_tls_server

PASSWORD = "s3cret-do-not-show"


def _start(tls: TLSFiles) -> PrivateServer:
    try:
        return start_tls_server(tls)
    except FileNotFoundError as exc:
        pytest.skip(str(exc))
    except NoTLS as exc:
        pytest.skip(str(exc))


def _files(certs: CertBundle, *, verify_clients: bool = False, as_client: bool = False) -> TLSFiles:
    """The server's files; `as_client`: it serves the client certificate instead (signed by the
    right CA, naming another host)."""
    return TLSFiles(
        ca_file=str(certs.ca_file),
        cert_file=str(certs.client_cert_file if as_client else certs.server_cert_file),
        key_file=str(certs.client_key_file if as_client else certs.server_key_file),
        verify_clients=verify_clients,
        client_cert_file=str(certs.client_cert_file),
        client_key_file=str(certs.client_key_file),
    )


@pytest.fixture(scope="module")
def server(anarchon_tls_certs: CertBundle) -> Iterator[PrivateServer]:
    """TLS only; client certificates optional."""
    started = _start(_files(anarchon_tls_certs))
    yield started
    started.stop()


@pytest.fixture(scope="module")
def mtls_server(anarchon_tls_certs: CertBundle) -> Iterator[PrivateServer]:
    """TLS only; every client must present a certificate signed by the CA."""
    started = _start(_files(anarchon_tls_certs, verify_clients=True))
    yield started
    started.stop()


@pytest.fixture
async def raw(server: PrivateServer, anarchon_tls_certs: CertBundle) -> AsyncIterator[Any]:
    """A plain redis-py client over TLS: the oracle, bypassing the store."""
    client = aioredis.Redis.from_url(
        server.url, ssl_ca_certs=str(anarchon_tls_certs.ca_file), decode_responses=True
    )
    yield client
    await client.aclose()


def request(job: str, slot: int, instance: str, **fields: Any) -> ClaimRequest:
    return ClaimRequest(job=job, slot=slot, instance=instance, token=new_token(), **fields)


async def test_lease_claims_renew_and_finish_over_tls(
    server: PrivateServer, anarchon_tls_certs: CertBundle, raw: Any
) -> None:
    url = f"{server.url}?tls_ca_file={anarchon_tls_certs.ca_file}&prefix=tlslease"
    async with anarchon.connect(url) as first, anarchon.connect(url) as second:
        assert isinstance(first, LeaseStore) and isinstance(second, LeaseStore)
        slot = await first.now_ms() // 1000 * 1000
        mine = request("report", slot, "a", lease_ms=60_000)
        won = await first.claim(mine)
        assert won.outcome is Outcome.WON and won.attempt == 1
        assert (await second.claim(request("report", slot, "b"))).outcome is Outcome.RUNNING
        assert await first.renew("report", slot, mine.token, 60_000)
        assert await first.finish("report", slot, mine.token, RunStatus.SUCCEEDED)
        assert (await second.claim(request("report", slot, "b"))).outcome is Outcome.DONE
    stored = await testing.raw_run(raw, "tlslease", "report", slot)
    assert stored is not None and stored.status is RunStatus.SUCCEEDED
    assert stored.token == mine.token


async def test_stream_id_claims_over_tls(
    server: PrivateServer, anarchon_tls_certs: CertBundle, raw: Any
) -> None:
    url = f"{server.url}?tls_ca_file={anarchon_tls_certs.ca_file}&strategy=stream-id"
    async with (
        anarchon.connect(url, prefix="tlsstream") as first,
        anarchon.connect(url, prefix="tlsstream") as second,
    ):
        slot = await first.now_ms() // 1000 * 1000
        mine = request("report", slot, "a")
        assert (await first.claim(mine)).outcome is Outcome.WON
        assert (await second.claim(request("report", slot, "b"))).outcome is Outcome.LOST
        assert (await first.claim(mine)).outcome is Outcome.WON, "C2: the same token again"
    stored = await testing.raw_claim(raw, "tlsstream", "report", slot)
    assert stored is not None and stored.token == mine.token


async def test_mutual_tls_presents_the_client_certificate(
    mtls_server: PrivateServer, anarchon_tls_certs: CertBundle
) -> None:
    options = anarchon_tls_certs.store_options(client=True)
    async with anarchon.connect(mtls_server.url, **options) as store:
        slot = await store.now_ms() // 1000 * 1000
        assert (await store.claim(request("mtls", slot, "a"))).outcome is Outcome.WON


async def test_mutual_tls_without_a_client_certificate_says_what_to_give(
    mtls_server: PrivateServer, anarchon_tls_certs: CertBundle
) -> None:
    url = mtls_server.url.replace("rediss://", f"rediss://default:{PASSWORD}@")
    with pytest.raises(StoreUnavailable) as refused:
        await anarchon.connect(f"{url}?tls_ca_file={anarchon_tls_certs.ca_file}&timeout_ms=2s")
    message = str(refused.value)
    assert f"127.0.0.1:{mtls_server.port}" in message and "default:***@" in message
    assert "tls_cert_file" in message and PASSWORD not in message


async def test_a_tls_connection_closed_without_a_tls_error_still_names_the_client_options() -> None:
    """A server that verifies client certificates may refuse a missing one by resetting the
    connection, with no TLS alert the client sees (it depends on when the reset arrives): the
    error still names the options to give, never the password."""

    async def reset(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        sock = writer.get_extra_info("socket")
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
        writer.close()  # linger 0: the close is a reset

    server = await asyncio.start_server(reset, "127.0.0.1", 0)
    port = server.sockets[0].getsockname()[1]
    try:
        with pytest.raises(StoreUnavailable) as refused:
            await anarchon.connect(f"rediss://default:{PASSWORD}@127.0.0.1:{port}/0?timeout_ms=2s")
    finally:
        server.close()
        await server.wait_closed()
    message = str(refused.value)
    assert "tls_cert_file and tls_key_file" in message and PASSWORD not in message
    assert f"127.0.0.1:{port}" in message


@pytest.fixture(scope="module")
def wrong_host_server(anarchon_tls_certs: CertBundle) -> Iterator[PrivateServer]:
    """Serves a certificate of the right CA that names another host (the client certificate)."""
    started = _start(_files(anarchon_tls_certs, as_client=True))
    yield started
    started.stop()


@pytest.mark.parametrize("case", ["no CA given", "another CA", "wrong host"])
async def test_a_refused_server_certificate_is_a_clear_config_error(
    case: str,
    server: PrivateServer,
    wrong_host_server: PrivateServer,
    anarchon_tls_certs: CertBundle,
    tmp_path: Path,
) -> None:
    target, options = server, ""
    if case == "another CA":
        options = f"?tls_ca_file={CertBundle.create(tmp_path).ca_file}"
    elif case == "wrong host":
        target, options = wrong_host_server, f"?tls_ca_file={anarchon_tls_certs.ca_file}"
    url = target.url.replace("rediss://", f"rediss://default:{PASSWORD}@")
    with pytest.raises(ConfigError) as refused:
        await anarchon.connect(url + options)
    message = str(refused.value)
    assert f"rediss://default:***@127.0.0.1:{target.port}/0" in message
    assert "tls_ca_file" in message and PASSWORD not in message
    if case == "wrong host":
        assert "IP address mismatch" in message, message
    else:  # redis-server sends its CA along: OpenSSL finds it untrusted
        assert "self-signed certificate in certificate chain" in message, message


def test_tls_options_need_rediss(anarchon_tls_certs: CertBundle) -> None:
    with pytest.raises(
        ConfigError, match=r"TLS options \(tls_ca_file\) need a TLS connection: use rediss://"
    ):
        anarchon.create_store(f"redis://127.0.0.1:6379/0?tls_ca_file={anarchon_tls_certs.ca_file}")


def test_tls_files_must_exist_and_go_together(anarchon_tls_certs: CertBundle) -> None:
    with pytest.raises(ConfigError, match=r"tls_ca_file '/nowhere/ca.pem' is not a file"):
        anarchon.create_store("rediss://127.0.0.1:6379/0?tls_ca_file=/nowhere/ca.pem")
    cert = anarchon_tls_certs.client_cert_file
    with pytest.raises(ConfigError, match="tls_cert_file and tls_key_file go together"):
        anarchon.create_store(f"rediss://127.0.0.1:6379/0?tls_cert_file={cert}")
