"""The exceptions anarchon raises. Every message says what was wrong and how to fix it."""

from __future__ import annotations

import ssl

__all__ = [
    "AnarchonError",
    "ConfigError",
    "Fenced",
    "StoreCorrupt",
    "StoreNotSetUp",
    "StoreUnavailable",
    "tls_error",
]


class AnarchonError(Exception):
    """Base class of every error anarchon raises on purpose."""


class ConfigError(AnarchonError, ValueError):
    """Invalid configuration: a cron expression, name, URL, option or duration.

    Raised before anything is written, so a bad setting loses nothing.
    """


class StoreNotSetUp(ConfigError):
    """A store opened read-only (`SupportsReadOnly`) holds no anarchon data where it was told to
    look: no scheduler has used it with these options (schema, prefix, stream), or the URL names
    another store. The message says where it looked."""


class StoreUnavailable(AnarchonError, ConnectionError):
    """The store could not be reached, or the connection broke during a call.

    A claim that fails this way may be resent with the same token (rule C2).
    """


class StoreCorrupt(AnarchonError):
    """The store holds data anarchon did not write, or that it cannot read.

    The message names the key, row or table. anarchon never overwrites such data.
    """


class Fenced(AnarchonError):
    """The run's lease is no longer held by this instance (rule F1).

    Raised by `Run.ensure_held()` once the runner fenced itself or the store refused a renew.
    """


_CHAIN_LIMIT = 16
"""Exceptions of a chain `tls_error` looks at (a chain may loop)."""


def tls_error(
    exc: BaseException, where: str, *, ca_option: str, cert_options: str, tls: bool = False
) -> ConfigError | StoreUnavailable | None:
    """For backends whose driver does TLS in Python: the error for a failed TLS handshake found
    anywhere in `exc`'s chain (drivers wrap it in their own errors), or None if there is none.

    A refused server certificate (unknown CA, a host name it does not name) is a `ConfigError`:
    trying again will not help. Any other TLS failure (a plain port, a server that wants a client
    certificate) is `StoreUnavailable`. `where` names the server without its password (``Redis at
    rediss://app:***@host:6380/0``); `ca_option` and `cert_options` are the store's options that
    fix it (``tls_ca_file``; ``tls_cert_file and tls_key_file``).

    With `tls` (the connection uses TLS), a connection the server reset or closed (end of file)
    is a TLS failure too: a server that verifies client certificates may refuse a missing one
    that way, before or after the handshake (TLS 1.3 sends its alert once the client's side is
    done), and whether the client sees the alert depends on timing and on the driver.
    """
    seen: BaseException | None = exc
    closed: BaseException | None = None
    for _ in range(_CHAIN_LIMIT):
        if seen is None or isinstance(seen, ssl.SSLError):
            break
        if isinstance(seen, (ConnectionResetError, EOFError)):  # asyncio.IncompleteReadError
            closed = seen
        seen = seen.__cause__ or seen.__context__
    if not isinstance(seen, ssl.SSLError):
        if tls and closed is not None:
            return StoreUnavailable(
                f"{where}: the server closed the TLS connection ({closed!r}): is it running, "
                f"and if it verifies client certificates, are {cert_options} given?"
            )
        return None
    if isinstance(seen, ssl.SSLCertVerificationError):
        return ConfigError(
            f"{where}: the server's TLS certificate was refused ({seen.verify_message}): set "
            f"{ca_option} to the CA that signed it (default: the system's CAs), and connect by a "
            "host name or address the certificate names"
        )
    reason = getattr(seen, "reason", None) or seen  # set by OpenSSL's errors only
    return StoreUnavailable(
        f"{where}: TLS failed ({reason}): does the server use TLS on this port, and if it "
        f"verifies client certificates, are {cert_options} given?"
    )
