"""``amqps://`` through a TLS front (`anarchon_conformance.tls.TLSFront`) in front of the test
broker, with a private CA made for this test session: a prepared claim is won once and lost
after, and a broker certificate from another CA is a clear error without the password."""

from __future__ import annotations

import time
from collections.abc import AsyncIterator
from pathlib import Path
from urllib.parse import urlsplit

import pytest

import anarchon
from anarchon import ClaimRequest, ConfigError, Outcome, StoreUnavailable, SupportsPrepare
from anarchon_conformance.tls import CertBundle, TLSFront
from anarchon_rabbitmq import queue_name

from .conftest import AMQP_URL, address, message_count

PASSWORD = "s3cret-do-not-show"


@pytest.fixture
async def front(prefix: str, anarchon_tls_certs: CertBundle) -> AsyncIterator[TLSFront]:
    async with TLSFront(*address(), anarchon_tls_certs) as started:
        yield started


def amqps_url(front: TLSFront, *, password: str | None = None) -> str:
    """The test broker's URL, as ``amqps://`` through `front`."""
    parts = urlsplit(AMQP_URL)
    secret = parts.password if password is None else password
    return f"amqps://{parts.username}:{secret}@127.0.0.1:{front.port}{parts.path or '/'}"


async def test_a_prepared_claim_over_amqps_is_won_once(
    front: TLSFront, prefix: str, cleanup: set[str], anarchon_tls_certs: CertBundle
) -> None:
    url = f"{amqps_url(front)}?cafile={anarchon_tls_certs.ca_file}"
    slot = time.time_ns() // 1_000_000 // 1000 * 1000 + 2000
    cleanup.add(queue_name(prefix, "report", slot))
    async with (
        anarchon.connect(url, prefix=prefix) as first,
        anarchon.connect(url, prefix=prefix) as second,
    ):
        assert isinstance(first, SupportsPrepare)
        await first.prepare(["report"], slot)
        claim = ClaimRequest(job="report", slot=slot, instance="a")
        assert (await first.claim(claim)).outcome is Outcome.WON
        other = ClaimRequest(job="report", slot=slot, instance="b")
        assert (await second.claim(other)).outcome is Outcome.LOST
    assert front.handshakes >= 2, "both stores came through the TLS front"
    assert await message_count(queue_name(prefix, "report", slot)) == 1


async def test_mutual_tls_presents_the_client_certificate(
    prefix: str, cleanup: set[str], anarchon_tls_certs: CertBundle
) -> None:
    """The front stands for a broker with ``fail_if_no_peer_cert``: it requires a certificate
    of the CA, so only a store that passes ``certfile`` and ``keyfile`` on gets through."""
    slot = time.time_ns() // 1_000_000 // 1000 * 1000 + 2000
    cleanup.add(queue_name(prefix, "report", slot))
    options = anarchon_tls_certs.store_options(
        client=True, ca="cafile", cert="certfile", key="keyfile"
    )
    async with TLSFront(*address(), anarchon_tls_certs, verify_clients=True) as front:
        async with anarchon.connect(amqps_url(front), prefix=prefix, **options) as store:
            claim = ClaimRequest(job="report", slot=slot, instance="a")
            assert (await store.claim(claim)).outcome is Outcome.WON
        assert front.handshakes >= 1
        without = anarchon_tls_certs.store_options(ca="cafile")
        with pytest.raises(StoreUnavailable) as refused:
            await anarchon.connect(amqps_url(front), prefix=prefix, **without)
        message = str(refused.value)
        assert f"127.0.0.1:{front.port}" in message and "certfile and keyfile" in message, message


async def test_a_broker_certificate_from_another_ca_is_a_clear_error(
    front: TLSFront, prefix: str, tmp_path: Path
) -> None:
    stranger = CertBundle.create(tmp_path)
    url = f"{amqps_url(front, password=PASSWORD)}?cafile={stranger.ca_file}"
    with pytest.raises(ConfigError) as refused:
        await anarchon.connect(url, prefix=prefix)
    message = str(refused.value)
    assert f"amqps://{urlsplit(url).username}:***@127.0.0.1:{front.port}" in message, message
    assert "cafile" in message and "certificate" in message and PASSWORD not in message
    assert front.handshakes == 0
