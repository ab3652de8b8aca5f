"""Connecting to NATS: the driver's arguments from the URL, errors that never show a secret, and
the open connection as the strategies use it (`Link`).

The password (or token) is handed to nats-py as an argument, never inside the server URL, so no
driver message can repeat it; every message anarchon builds is scrubbed of it as well.
"""

from __future__ import annotations

import asyncio
import ssl
from typing import TYPE_CHECKING, Any

import attrs
import nats.errors
from nats.js.errors import APIError, NoStreamResponseError

from anarchon import AnarchonError, ConfigError, StoreCorrupt, StoreUnavailable, StoreURL
from anarchon.backend import tls_error

from ._answers import Acks, NotAnAnswer

if TYPE_CHECKING:
    from nats.aio.client import Client
    from nats.js import JetStreamContext

    from ._options import NATSOptions
    from ._replies import Replies

__all__ = [
    "DRIVER_ERRORS",
    "ConnectErrors",
    "Link",
    "connect_kwargs",
    "refused_login",
    "refused_tls",
    "scrub",
    "shown_url",
    "translate",
]

DEFAULT_PORT = 4222
JS_API = "$JS.API"
"""The JetStream API's subject prefix (no domain), as nats-py's ``jetstream()`` uses it."""
DRIVER_ERRORS = (nats.errors.Error, OSError, asyncio.TimeoutError, TimeoutError, ValueError)
"""What the driver raises (ValueError: an answer that is not JSON)."""


def servers(url: StoreURL) -> list[str]:
    """``host:port`` of every server the URL names (``nats://h1:4222,h2:4222,h3:4222``: the
    client follows a cluster through any of them)."""
    pairs = url.hosts or ((url.host, url.port),)
    shown = []
    for host, port in pairs:
        name = host or "127.0.0.1"
        shown.append(
            f"[{name}]:{port or DEFAULT_PORT}" if ":" in name else f"{name}:{port or DEFAULT_PORT}"
        )
    return shown


def shown_url(url: StoreURL) -> str:
    """``scheme://user:***@host:port`` (a token alone is shown as ``***@``), without options;
    every server of a cluster URL, comma-separated."""
    auth = ""
    if url.username is not None and url.password is not None:
        auth = f"{url.username}:***@"
    elif url.username is not None:
        auth = "***@"
    return f"{url.scheme}://{auth}{','.join(servers(url))}"


def secrets(url: StoreURL) -> tuple[str, ...]:
    values = [url.password or ""]
    if url.password is None and url.username:
        values.append(url.username)  # a token
    return tuple(v for v in values if v)


def scrub(text: str, hidden: tuple[str, ...]) -> str:
    for secret in hidden:
        text = text.replace(secret, "***")
    return text


_LOGIN_REFUSALS = ("authorization", "authentication")
"""Words of the server's ``-ERR`` when it refuses the credentials: ``'Authorization Violation'``,
``'Authentication Timeout'``, ``'User Authentication Expired'``, ``'Authentication Revoked'``."""


def refused_login(exc: BaseException) -> bool:
    """The server refused the credentials (its ``-ERR``), as opposed to a transport failure."""
    if isinstance(exc, nats.errors.AuthorizationError):
        return True
    text = str(exc).lower()
    return isinstance(exc, nats.errors.Error) and any(word in text for word in _LOGIN_REFUSALS)


class ConnectErrors:
    """The errors nats-py reports (``error_cb``) while `open` connects, and the one to show.

    A refused login is shown even when other errors follow it: after its ``-ERR`` the server
    hangs up, and nats-py then reports a ``ConnectionResetError`` from closing that socket (the
    server resets a connection it closed with our ``PING`` unread). That reset is noise; the
    refusal is the reason. Otherwise the latest error is shown.
    """

    def __init__(self, hidden: tuple[str, ...]) -> None:
        self.hidden = hidden
        self.last: str | None = None
        self.refusal: str | None = None

    def clear(self) -> None:
        self.last = self.refusal = None

    def add(self, exc: BaseException) -> str:
        """Remember `exc`; its text, scrubbed of the secrets."""
        text = scrub(f"{type(exc).__name__}: {exc}".strip(), self.hidden)
        self.last = text
        if refused_login(exc):
            self.refusal = text
        return text

    def reason(self, final: BaseException) -> tuple[str, bool]:
        """What made connecting fail (`final`: what nats-py raised at last), and whether it is a
        refused login."""
        if self.refusal is not None:
            return self.refusal, True
        if refused_login(final):
            return self.add(final), True
        return self.last or scrub(f"{type(final).__name__}: {final}", self.hidden), False


def refused_tls(exc: BaseException, where: str, *, tls: bool) -> AnarchonError | None:
    """The error for a TLS handshake that failed while connecting (on a `tls` connection, a
    reset too), or None if `exc` is not one."""
    return tls_error(
        exc,
        f"NATS at {where}",
        ca_option="tls_ca_file",
        cert_options="tls_cert_file and tls_key_file",
        tls=tls,
    )


def _tls_context(options: NATSOptions) -> ssl.SSLContext:
    try:
        context = ssl.create_default_context(cafile=options.tls_ca_file)
        if options.tls_cert_file and options.tls_key_file:
            context.load_cert_chain(options.tls_cert_file, options.tls_key_file)
    except (OSError, ssl.SSLError) as exc:
        raise ConfigError(f"cannot load the TLS files: {exc}") from None
    return context


def connect_kwargs(url: StoreURL, options: NATSOptions) -> dict[str, Any]:
    """nats-py's `connect` arguments; credentials separate from the server address."""
    if url.scheme not in ("nats", "tls"):
        raise ConfigError(f"NATS URL {shown_url(url)} must start with nats:// or tls://")
    if url.path:
        raise ConfigError(
            f"NATS URL {shown_url(url)} has a path {url.path!r}: write nats://host:port"
        )
    kwargs: dict[str, Any] = {"servers": [f"{url.scheme}://{where}" for where in servers(url)]}
    if url.username is not None and url.password is not None:
        kwargs["user"] = url.username
        kwargs["password"] = url.password
    elif url.username:
        kwargs["token"] = url.username
    if url.scheme == "tls" or options.tls_ca_file or options.tls_cert_file:
        kwargs["tls"] = _tls_context(options)
        kwargs["tls_hostname"] = url.host
    return kwargs


def translate(
    exc: BaseException, where: str, hidden: tuple[str, ...], last: str | None = None
) -> AnarchonError:
    """The anarchon error for a driver error raised by an operation on the server `where`;
    `last` is the latest error the server reported on the connection (``error_cb``)."""
    if isinstance(exc, AnarchonError):
        return exc
    if (
        isinstance(exc, (nats.errors.TimeoutError, asyncio.TimeoutError, TimeoutError))
        and last is not None
        and "permissions violation" in last.lower()
    ):
        # The server drops a request the user may not send, so the request times out; the
        # violation itself came to error_cb.
        return ConfigError(
            f"NATS at {where}: permission denied ({last}); see the backend's docs for the "
            "subjects the user must be allowed (a monitoring user: Read-only monitoring)"
        )
    detail = scrub(" ".join(str(exc).split()) or type(exc).__name__, hidden)
    if isinstance(exc, NoStreamResponseError):
        return StoreUnavailable(
            f"NATS at {where}: no JetStream answer ({detail}); the server may be starting, or "
            "JetStream is off; the claim may be resent with the same token"
        )
    if isinstance(exc, NotAnAnswer):
        return StoreUnavailable(
            f"NATS at {where}: {detail}; is something between anarchon and the server "
            "rewriting replies? The claim may be resent with the same token"
        )
    if isinstance(exc, APIError):
        if exc.code in (401, 403) or "permission" in detail.lower():
            return ConfigError(
                f"NATS at {where}: permission denied ({detail}); see the README for the "
                "subjects the user must be allowed"
            )
        if exc.code is not None and exc.code >= 500:
            return StoreUnavailable(f"NATS at {where}: JetStream is unavailable ({detail})")
        return StoreCorrupt(f"NATS at {where}: JetStream refused a request ({detail})")
    if isinstance(exc, (nats.errors.Error, OSError, asyncio.TimeoutError, TimeoutError)):
        return StoreUnavailable(
            f"NATS at {where} cannot be reached ({detail}); check host, port, user and password "
            "(not shown); a claim may be resent with the same token"
        )
    return StoreUnavailable(f"NATS at {where} failed ({type(exc).__name__}: {detail})")


@attrs.frozen
class Link:
    """An open connection, as claims and reads use it: the client, its JetStream context, the
    store's reply subscription, and what every error message names."""

    nc: Client
    js: JetStreamContext
    replies: Replies
    stream: str
    where: str
    timeout: float
    """Seconds a request may take."""
    hidden: tuple[str, ...]
    """The secrets no message may show."""
    errors: ConnectErrors | None = attrs.field(default=None, kw_only=True)
    """What the server reported on the connection (a permission violation names itself only
    there)."""
    acks: Acks = attrs.field(init=False)
    get_api: str = attrs.field(init=False)
    """The subject of a message get on the stream."""

    @acks.default
    def _acks(self) -> Acks:
        return Acks(self.stream)

    @get_api.default
    def _get_api(self) -> str:
        return f"{JS_API}.STREAM.MSG.GET.{self.stream}"

    def error(self, exc: BaseException) -> AnarchonError:
        """The anarchon error for a driver error raised on this connection."""
        last = self.errors.last if self.errors is not None else None
        return translate(exc, self.where, self.hidden, last)
