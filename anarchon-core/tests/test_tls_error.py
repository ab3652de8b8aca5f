"""`anarchon._errors.tls_error`: the TLS failure inside a driver's error, as anarchon's error."""

from __future__ import annotations

import asyncio
import ssl

import pytest

from anarchon import ConfigError, StoreUnavailable
from anarchon._errors import tls_error

OPTIONS = {"ca_option": "tls_ca_file", "cert_options": "tls_cert_file and tls_key_file"}


def wrapped(inner: BaseException) -> Exception:
    """`inner` as a driver raises it: inside its own error, as the cause of another."""
    try:
        try:
            raise inner
        except ssl.SSLError as exc:
            raise ConnectionError("Error 1 connecting to 127.0.0.1:6380") from exc
    except ConnectionError as outer:
        return outer


def test_a_refused_certificate_is_a_config_error_naming_the_ca_option() -> None:
    refused = ssl.SSLCertVerificationError(1, "certificate verify failed")
    refused.verify_message = "unable to get local issuer certificate"
    error = tls_error(wrapped(refused), "Redis at rediss://app:***@h:6380/0", **OPTIONS)
    assert isinstance(error, ConfigError)
    assert str(error).startswith("Redis at rediss://app:***@h:6380/0: the server's TLS")
    assert "unable to get local issuer certificate" in str(error) and "tls_ca_file" in str(error)


def test_another_tls_failure_is_unavailable_naming_the_client_certificate() -> None:
    error = tls_error(wrapped(ssl.SSLError(1, "alert certificate required")), "X", **OPTIONS)
    assert isinstance(error, StoreUnavailable) and "tls_cert_file and tls_key_file" in str(error)


@pytest.mark.parametrize(
    "closed",
    [ConnectionResetError(104, "Connection reset by peer"), asyncio.IncompleteReadError(b"", 1)],
)
def test_a_closed_tls_connection_is_unavailable_naming_the_client_certificate(
    closed: BaseException,
) -> None:
    """A server may refuse a missing client certificate by resetting or closing the connection
    (redis-py sees the reset, aiormq the end of file): on a TLS connection that names the
    options too; on a plain one it is no TLS failure."""
    try:
        try:
            raise closed
        except (ConnectionResetError, EOFError) as exc:
            raise ConnectionError("Error connecting to 127.0.0.1:6380") from exc
    except ConnectionError as outer:
        error = tls_error(outer, "X", **OPTIONS, tls=True)
        assert tls_error(outer, "X", **OPTIONS) is None
    assert isinstance(error, StoreUnavailable)
    assert "closed the TLS connection" in str(error)
    assert "tls_cert_file and tls_key_file" in str(error)


def test_no_tls_failure_is_none_even_in_a_looping_chain() -> None:
    first, second = ConnectionError("a"), OSError("b")
    first.__cause__, second.__cause__ = second, first
    assert tls_error(first, "X", **OPTIONS) is None
    assert tls_error(ConnectionRefusedError(111, "refused"), "X", **OPTIONS) is None
