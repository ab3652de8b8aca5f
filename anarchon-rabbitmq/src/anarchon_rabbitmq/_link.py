"""The store's connections to RabbitMQ: one AMQP connection with a few confirm channels for the
claims, a second one for the preparations, each reopened on demand, and the translation of driver
errors into anarchon's (never showing the password)."""

from __future__ import annotations

import asyncio
import contextlib
import logging
import secrets
from collections.abc import Callable, Sequence
from typing import Any
from urllib.parse import urlencode

import aiormq
from aiormq.abc import AbstractChannel, AbstractConnection

from anarchon import AnarchonError, ConfigError, StoreUnavailable, StoreURL, redact
from anarchon.backend import tls_error

from ._options import RabbitMQOptions
from ._queues import WARM_UP, probe_name

__all__ = ["DECLARE_BATCH", "DECLARE_TRIES", "Link", "broken", "driver_url", "ignore_result"]

log = logging.getLogger("anarchon.rabbitmq")

DECLARE_BATCH = 256
"""`Link.declare` sends this many declarations (no-wait), then waits for the broker to reach
them, so a preparation of thousands of queues never floods the broker or the connection."""
DECLARE_TRIES = 3
CLOSE_GRACE_S = 5.0
"""Longest `Link.close` lets a batch whose preparation was cut short finish (a batch takes the
broker about a second), so that it closes the connection with nothing left in flight."""

_DRIVER_ERRORS = (
    aiormq.exceptions.AMQPError,
    OSError,
    RuntimeError,
    asyncio.IncompleteReadError,
    asyncio.TimeoutError,
)
"""What a broken channel or connection raises (aiormq's ChannelInvalidStateError is a
RuntimeError)."""


def broken(exc: BaseException) -> bool:
    """Whether `exc` says the channel or connection broke. Besides `_DRIVER_ERRORS`, that is a
    bare ``Exception``: when the broker side closes the socket cleanly (EOF between frames),
    aiormq closes the connection without a reason and fails every pending call with the class
    ``Exception`` itself."""
    return isinstance(exc, _DRIVER_ERRORS) or type(exc) is Exception


def driver_url(url: StoreURL, options: RabbitMQOptions) -> str:
    """The URL aiormq connects to: the store URL without anarchon's options, plus the driver's
    own parameters (heartbeat, TLS files). Contains the password: never log it."""
    params: dict[str, str] = {"heartbeat": str(options.heartbeat_s)}
    if options.cafile:
        params["cafile"] = options.cafile
    if options.certfile:
        params["certfile"] = options.certfile
    if options.keyfile:
        params["keyfile"] = options.keyfile
    if not options.verify:
        params["no_verify_ssl"] = "1"
    base = url.without_query()
    if base.count("/") < 3:
        base += "/"  # aiormq needs a path; "/" is the default virtual host
    return f"{base}?{urlencode(params)}"


class Link:
    """One connection and `options.channels` confirm channels for the claims, used in turn, and
    a connection of their own for the preparations (`declare`). A closed channel or connection
    is reopened by the next call; a failed reconnect is `StoreUnavailable`."""

    def __init__(self, url: StoreURL, options: RabbitMQOptions) -> None:
        self._url = driver_url(url, options)
        self._tls = url.scheme == "amqps"
        self.shown = str(url).split("?", 1)[0]
        self._vhost = url.path or "/"
        self._secrets = tuple(s for s in (url.password,) if s)
        self._options = options
        self._connection: AbstractConnection | None = None
        self._channels: list[AbstractChannel | None] = [None] * options.channels
        self._turn = 0
        self._lock = asyncio.Lock()
        self._preparing: AbstractConnection | None = None
        """The preparations' own connection (see `declare`), opened by the first one."""
        self._declaring: AbstractChannel | None = None
        self._declare_lock = asyncio.Lock()
        self._batch: asyncio.Future[None] | None = None
        """The last batch of declarations (see `_declare_batch`)."""
        self._closed = False
        self._warm_up: bool | None = None
        """Prepared queues get a `WARM_UP` message (None: not probed yet, see `_warms_up`)."""

    # -- errors ---------------------------------------------------------------------------------
    def scrub(self, text: str) -> str:
        text = redact(text)
        for secret in self._secrets:
            text = text.replace(secret, "***")
        return text

    def unavailable(self, what: str, exc: BaseException | None = None) -> StoreUnavailable:
        detail = f": {self.scrub(f'{type(exc).__name__}: {exc}')}" if exc is not None else ""
        return StoreUnavailable(f"RabbitMQ at {self.shown}: {what}{detail}")

    def translate(self, exc: BaseException) -> AnarchonError:
        """A connection failure as `ConfigError` (login, virtual host or the broker's TLS
        certificate refused: retrying will not help) or `StoreUnavailable` (the broker is down or
        unreachable: retry)."""
        if isinstance(exc, (aiormq.exceptions.ProbableAuthenticationError,)):
            return ConfigError(
                f"RabbitMQ at {self.shown} refused the login: {self.scrub(str(exc))}. Check the "
                "user name and password in the URL, and that the user may use this virtual host"
            )
        if isinstance(exc, aiormq.exceptions.AuthenticationError):
            return ConfigError(
                f"RabbitMQ at {self.shown} offers no authentication mechanism anarchon can use: "
                f"{self.scrub(str(exc))}"
            )
        if isinstance(exc, aiormq.exceptions.ConnectionNotAllowed) or (
            # aiormq (6.8) reports the broker closing the connection at `connection.open`, where
            # it checks the virtual host, as a frame it did not expect, without the reason.
            isinstance(exc, aiormq.exceptions.InvalidFrameError)
            and "Connection.OpenOk" in str(exc)
            and "Connection.Close" in str(exc)
        ):
            return ConfigError(
                f"RabbitMQ at {self.shown} refused the virtual host {self._vhost!r} at login: it "
                "does not exist, the user has no permissions on it, or it takes no more "
                "connections (the broker's log says which). Create it (rabbitmqctl add_vhost), "
                "grant the user (rabbitmqctl set_permissions), or fix the URL's path"
            )
        tls = tls_error(
            exc,
            f"RabbitMQ at {self.shown}",
            ca_option="cafile",
            cert_options="certfile and keyfile",
            tls=self._tls,
        )
        return tls or self.unavailable("cannot connect", exc)

    # -- connection -----------------------------------------------------------------------------
    @property
    def connected(self) -> bool:
        return self._connection is not None and not self._connection.is_closed

    async def channel(self) -> AbstractChannel:
        """The next open confirm channel, reconnecting or reopening it when needed."""
        turn = self._turn
        self._turn = (turn + 1) % len(self._channels)
        channel = self._channels[turn]
        if channel is not None and not channel.is_closed and self.connected:
            return channel
        async with self._lock:
            connection = await self._connected()
            channel = self._channels[turn]
            if channel is None or channel.is_closed:
                channel = await self._open_channel(connection)
                self._channels[turn] = channel
            return channel

    async def _connected(self) -> AbstractConnection:
        """The open connection, or a new one (call with the lock held)."""
        connection = self._connection
        if connection is not None and not connection.is_closed:
            return connection
        self._connection = None
        self._channels = [None] * len(self._channels)
        if connection is not None:
            await _quietly_close(connection)
        connection = await self._connect()
        # All channels now, so that a claim's first write is its claim, not a channel opening.
        try:
            channels: list[AbstractChannel | None] = [
                await self._open_channel(connection) for _ in self._channels
            ]
        except BaseException:
            await _quietly_close(connection)
            raise
        self._connection, self._channels = connection, channels
        log.debug("connected to RabbitMQ at %s", self.shown)
        return connection

    async def _connect(self) -> AbstractConnection:
        """A new connection to the broker, or `StoreUnavailable` / `ConfigError`."""
        timeout = self._options.connect_timeout_ms / 1000
        try:
            return await asyncio.wait_for(aiormq.connect(self._url), timeout)
        except asyncio.TimeoutError as exc:
            raise self.unavailable(f"no connection within {timeout:g} s", exc) from None
        except Exception as exc:
            if not broken(exc):
                raise
            raise self.translate(exc) from None

    async def _open_channel(
        self, connection: AbstractConnection, *, confirms: bool = True
    ) -> AbstractChannel:
        """A confirm channel for claims, or (`confirms` false) a plain one for declarations."""
        try:
            return await asyncio.wait_for(
                connection.channel(publisher_confirms=confirms, on_return_raises=confirms),
                self._options.connect_timeout_ms / 1000,
            )
        except Exception as exc:
            if not broken(exc):
                raise
            raise self.unavailable("cannot open a channel", exc) from None

    async def ensure(self) -> None:
        """Connect now and open every channel, or raise."""
        self._closed = False
        async with self._lock:
            await self._connected()

    async def declare(
        self,
        queues: Sequence[str],
        arguments: dict[str, Any],
        until: Callable[[], bool],
        declared: Callable[[Sequence[str]], None],
    ) -> None:
        """Declare durable `queues` with `arguments` on a connection of their own (see
        `_declare_batch`), `DECLARE_BATCH` at a time, each warmed up (`WARM_UP`) where the
        broker allows it, stopping early once `until()` is true; `declared(batch)` gets each
        batch the broker has answered, whose queues all exist as declared. A batch the broker
        answers with NOT_FOUND (RabbitMQ 3.10 says "home node ... is down" to a declaration that
        races another's creation of the same queue) is sent again on a new channel, up to
        `DECLARE_TRIES` times. Raises `StoreUnavailable` if the link breaks, and the driver's
        channel error if the broker refuses a declaration (which closes that channel)."""
        async with self._declare_lock:
            for start in range(0, len(queues), DECLARE_BATCH):
                if until():
                    return
                batch = queues[start : start + DECLARE_BATCH]
                for attempt in range(1, DECLARE_TRIES + 1):
                    try:
                        await self._declare_batch(batch, arguments)
                        declared(batch)
                        break
                    except aiormq.exceptions.ChannelNotFoundEntity:
                        if attempt == DECLARE_TRIES:
                            raise

    async def _declare_batch(self, batch: Sequence[str], arguments: dict[str, Any]) -> None:
        """Send `batch` and wait for the broker's answers, in a task of its own that the
        caller's cancellation does not reach: a preparation cut short (the scheduler bounds it
        in time) returns at once, and its batch goes on to its end, with the next one behind it.

        Cancelled inside aiormq (7.2), a call closes its channel by sending Channel.Close and
        keeps the channel's number until the broker's Channel.CloseOk; the broker first answers
        what came before (up to a batch of warm-ups), and should anything stop that channel's
        reader meanwhile (its ``close()`` does), those answers fill its frame buffer (10 frames)
        and the connection's reader waits on it for good: no frame reaches any channel of the
        connection again. So no preparation is ever cancelled mid-call, and the batches have a
        connection of their own: whatever befalls it, no claim waits on it."""
        previous = self._batch
        if previous is not None and not previous.done():
            await asyncio.wait({previous})  # a cut-short preparation's batch: its outcome is moot
        batch_done = self._batch = asyncio.ensure_future(self._send_batch(batch, arguments))
        batch_done.add_done_callback(ignore_result)
        await asyncio.shield(batch_done)

    async def _send_batch(self, batch: Sequence[str], arguments: dict[str, Any]) -> None:
        """Declare `batch` (no-wait), each queue warmed up right behind its declaration, on the
        declaring channel (with confirms), and wait until the broker has handled all of it: the
        declarations (a round trip behind them) and the warm-ups (their confirms, once stored
        and dropped). So a preparation leaves the broker no work behind it that the claims at
        the slot would queue up behind."""
        warm_ups: list[asyncio.Future[object]] = []
        try:
            channel = await self._declaring_channel()
            if self._warm_up is None:
                self._warm_up = await self._warms_up(channel, arguments)
            for queue in batch:
                await channel.queue_declare(queue, durable=True, nowait=True, arguments=arguments)
                if self._warm_up:
                    warm_ups.append(
                        asyncio.ensure_future(
                            channel.basic_publish(b"", routing_key=queue, properties=WARM_UP)
                        )
                    )
            # A round trip behind them: the broker has handled every declaration sent.
            await channel.basic_qos(prefetch_count=0)
            for outcome in await asyncio.gather(*warm_ups, return_exceptions=True):
                # A nack: the queue holds a claim already (a late preparation), as it should.
                if isinstance(outcome, BaseException) and not isinstance(
                    outcome, aiormq.exceptions.DeliveryError
                ):
                    raise outcome
        except aiormq.exceptions.ChannelClosed:
            raise  # the broker refused one (NOT_FOUND, PRECONDITION_FAILED, ACCESS_REFUSED)
        except Exception as exc:
            if not broken(exc) or isinstance(exc, AnarchonError):
                raise
            raise self.unavailable(f"declaring {len(batch)} queue(s) failed", exc) from None
        finally:
            for warm_up in warm_ups:  # left behind by a failure: nobody waits for them
                warm_up.cancel()
                warm_up.add_done_callback(ignore_result)

    async def _declaring_channel(self) -> AbstractChannel:
        """The preparations' channel, (re)opened on their own connection when needed."""
        connection = self._preparing
        if connection is None or connection.is_closed:
            if self._closed:  # a preparation that waited for a batch while the store closed
                raise self.unavailable("the store is closed")
            self._preparing = self._declaring = None
            connection = self._preparing = await self._connect()
        channel = self._declaring
        if channel is None or channel.is_closed:
            channel = self._declaring = await self._open_channel(connection)
        return channel

    async def _warms_up(self, channel: AbstractChannel, arguments: dict[str, Any]) -> bool:
        """Whether this broker drops a `WARM_UP` message in the step that stores it, checked
        once on a queue of the store's own made like a run's: it must be empty once the broker
        has confirmed the warm-up (the declaring channel has confirms: without waiting for one, a
        passive declaration could be answered first, the queue serves it ahead of deliveries). A
        broker that kept it would refuse every claim of a warmed queue, so then queues are
        prepared without one, and a warning says so."""
        probe = probe_name(self._options.prefix, secrets.token_hex(8))
        await channel.queue_declare(
            probe, durable=True, arguments={**arguments, "x-expires": 60_000}
        )
        await channel.basic_publish(b"", routing_key=probe, properties=WARM_UP)
        kept = (await channel.queue_declare(probe, passive=True)).message_count or 0
        # Not in a `finally`: after a failure the channel is closed, and the probe expires.
        await channel.queue_delete(probe, nowait=True)
        if kept:
            log.warning(
                "RabbitMQ at %s kept a message that expires on arrival (expiration 0) in a "
                "queue without consumers; queues are prepared without warming them up, so a "
                "winning claim costs the broker's first-message setup",
                self.shown,
            )
        return not kept

    async def message_count(self, queue: str) -> int:
        """Messages in `queue` (0 if it does not exist), by a passive declare on a short-lived
        channel: it never consumes. Like any declaration the broker answers (not no-wait ones),
        it restarts the queue's expiry timer, which only makes RabbitMQ remember the run longer.
        Raises `StoreUnavailable`."""
        async with self._lock:
            connection = await self._connected()
        try:
            return await asyncio.wait_for(
                _passive_count(connection, queue), self._options.connect_timeout_ms / 1000
            )
        except Exception as exc:
            if not broken(exc):
                raise
            raise self.unavailable(f"cannot inspect queue {queue!r}", exc) from None

    async def close(self) -> None:
        """Close both connections, once a batch still in flight is done (`CLOSE_GRACE_S`)."""
        self._closed = True
        batch, self._batch = self._batch, None
        if batch is not None and not batch.done():
            await asyncio.wait({batch}, timeout=CLOSE_GRACE_S)
            batch.cancel()
        for connection in (self._preparing, self._connection):
            if connection is not None:
                await _quietly_close(connection)
        self._connection = self._preparing = self._declaring = None
        self._channels = [None] * len(self._channels)


def ignore_result(future: asyncio.Future[Any]) -> None:
    """A done callback for a future nobody awaits: retrieves its exception, so that asyncio
    does not log it as never retrieved."""
    if not future.cancelled():
        future.exception()


async def _passive_count(connection: AbstractConnection, queue: str) -> int:
    channel = await connection.channel(publisher_confirms=False)
    try:
        ok = await channel.queue_declare(queue, passive=True)
    except aiormq.exceptions.ChannelNotFoundEntity:
        return 0
    finally:
        if not channel.is_closed:
            await _quietly_close(channel)
    return int(ok.message_count or 0)


async def _quietly_close(closable: AbstractConnection | AbstractChannel) -> None:
    with contextlib.suppress(Exception):
        await asyncio.wait_for(closable.close(), 2)
