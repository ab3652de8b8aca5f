"""``tls://`` against private ``nats-server -js --tls`` processes whose certificates come from a
private CA made for this test session (`anarchon_conformance.tls`): claims of both strategies,
mutual TLS (``--tlsverify``), and the errors of a refused certificate, which name the server and
what to set, never the password."""

from __future__ import annotations

import ssl
import time
from collections.abc import Iterator
from pathlib import Path

import nats
import pytest

import anarchon
from anarchon import ClaimRequest, ConfigError, Outcome, StoreUnavailable
from anarchon_conformance.tls import CertBundle

from .conftest import PrivateServer, require_binary

PASSWORD = "s3cret-do-not-show"


def _server(root: Path, certs: CertBundle, *verify: str) -> Iterator[PrivateServer]:
    require_binary()
    server = PrivateServer(
        root,
        "--tls",
        "--tlscert",
        str(certs.server_cert_file),
        "--tlskey",
        str(certs.server_key_file),
    )
    server.args += verify
    server.start()
    yield server
    server.stop()


@pytest.fixture
def tls_server(tmp_path: Path, anarchon_tls_certs: CertBundle) -> Iterator[PrivateServer]:
    yield from _server(tmp_path, anarchon_tls_certs)


@pytest.fixture
def mtls_server(tmp_path: Path, anarchon_tls_certs: CertBundle) -> Iterator[PrivateServer]:
    """Requires a client certificate signed by the CA."""
    yield from _server(
        tmp_path, anarchon_tls_certs, "--tlsverify", "--tlscacert", str(anarchon_tls_certs.ca_file)
    )


def request(slot: int, instance: str) -> ClaimRequest:
    return ClaimRequest(job="report", slot=slot, instance=instance, max_late_ms=600_000)


async def stored_messages(server: PrivateServer, certs: CertBundle, stream: str) -> int:
    """Messages in `stream`, read over TLS with a plain nats-py client (the oracle)."""
    context = ssl.create_default_context(cafile=str(certs.ca_file))
    nc = await nats.connect(f"tls://127.0.0.1:{server.port}", tls=context, allow_reconnect=False)
    try:
        return int((await nc.jetstream().stream_info(stream)).state.messages)
    finally:
        await nc.close()


@pytest.mark.parametrize("strategy", ["msg-id", "expected-seq"])
async def test_claims_over_tls(
    tls_server: PrivateServer, anarchon_tls_certs: CertBundle, strategy: str
) -> None:
    url = f"tls://127.0.0.1:{tls_server.port}?tls_ca_file={anarchon_tls_certs.ca_file}"
    slot = time.time_ns() // 1_000_000 // 1000 * 1000
    async with (
        anarchon.connect(url, strategy=strategy) as first,
        anarchon.connect(url, strategy=strategy) as second,
    ):
        mine = request(slot, "a")
        assert (await first.claim(mine)).outcome is Outcome.WON
        assert (await second.claim(request(slot, "b"))).outcome is Outcome.LOST
        assert (await first.claim(mine)).outcome is Outcome.WON, "C2: the same token again"
    assert await stored_messages(tls_server, anarchon_tls_certs, "ANARCHON_cron") == 1


async def test_mutual_tls_presents_the_client_certificate(
    mtls_server: PrivateServer, anarchon_tls_certs: CertBundle
) -> None:
    url = f"tls://127.0.0.1:{mtls_server.port}"
    async with anarchon.connect(url, **anarchon_tls_certs.store_options(client=True)) as store:
        slot = time.time_ns() // 1_000_000 // 1000 * 1000
        assert (await store.claim(request(slot, "a"))).outcome is Outcome.WON


@pytest.mark.parametrize(
    ("case", "error", "fix"),
    [
        ("unknown CA", ConfigError, "tls_ca_file"),
        ("no client certificate", StoreUnavailable, "tls_cert_file and tls_key_file"),
    ],
)
async def test_a_refused_handshake_is_a_clear_error_at_once(
    case: str,
    error: type[Exception],
    fix: str,
    anarchon_tls_certs: CertBundle,
    request: pytest.FixtureRequest,
) -> None:
    """Neither hangs (nats-py alone would, after a failed handshake) nor retries."""
    mutual = case == "no client certificate"
    server: PrivateServer = request.getfixturevalue("mtls_server" if mutual else "tls_server")
    options = anarchon_tls_certs.store_options() if mutual else {}
    started = time.monotonic()
    with pytest.raises(error) as refused:
        await anarchon.connect(f"tls://app:{PASSWORD}@127.0.0.1:{server.port}", **options)
    assert time.monotonic() - started < 5, "at once, not after the connect timeout (5 s)"
    message = str(refused.value)
    assert f"tls://app:***@127.0.0.1:{server.port}" in message, message
    assert fix in message and PASSWORD not in message
