"""`nats://` and `tls://`: claims decided by JetStream, without leases.

This module holds the connection's lifecycle: connecting (bounded, with errors that never show a
secret), the driver's callbacks, the stream's setup on open, and close. Everything else is the
strategy's (`_strategies`, chosen by the ``strategy`` option: msg-id or expected-seq), and the
shared work is done by `_claim` (one claim and its read-back, on the store's own reply
subscription `_replies`), `_batch` (`claim_many`) and `_history`.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import ssl
from collections.abc import Mapping, Sequence
from typing import ClassVar

import attrs
import nats
from nats.aio.client import Client

from anarchon import (
    AnarchonError,
    Capabilities,
    Claim,
    ClaimRequest,
    ClaimStore,
    ConfigError,
    Member,
    RunRecord,
    StoreOptions,
    StoreUnavailable,
    StoreURL,
)
from anarchon.backend import structure_options

from ._connection import (
    DRIVER_ERRORS,
    ConnectErrors,
    Link,
    connect_kwargs,
    refused_tls,
    secrets,
    shown_url,
    translate,
)
from ._members import MemberList
from ._options import NATSOptions
from ._replies import Replies
from ._strategies import strategy_for

__all__ = ["NATSStore"]

log = logging.getLogger("anarchon.nats")

OPEN_STEPS = 8
"""Steps of `open`'s connect that may each take `timeout_ms`: two attempts of connect, INFO,
TLS and the first PING."""


class NATSStore(ClaimStore):
    """Claim store on a NATS JetStream stream (DESIGN section 4, store facts: NATS).

    No leases: a claim is `won` or `lost` (or `late`); a request with a `skip_reason` takes the
    slot with a skip message, which answers `skipped` to it and to every later claim (S1).
    Lateness is judged by this instance's clock (T4): a slot older than ``max_late_ms``, or older
    than the stream remembers a run (`Capabilities.remembers_ms`), is `late` and nothing is
    published; a slot so far ahead that the stream could forget its claim before
    ``slot + max_late_ms`` is refused with `ConfigError` (C5).
    """

    Options: ClassVar[type[StoreOptions]] = NATSOptions

    def __init__(self, url: StoreURL, options: StoreOptions) -> None:
        if not isinstance(options, NATSOptions):
            raise TypeError(f"NATSStore needs NATSOptions, got {type(options).__name__}")
        self.url = url
        self.options: NATSOptions = options
        self.where = shown_url(url)
        self._secrets = secrets(url)
        self._kwargs = connect_kwargs(url, options)
        self.strategy = strategy_for(options)
        """What a claim publishes and how it is read back (the ``strategy`` option)."""
        self.stream = options.stream_name
        self._timeout = options.timeout_ms / 1000
        self._nc: Client | None = None
        self._link: Link | None = None
        self._errors = ConnectErrors(self._secrets)
        self._read_only = False
        self._members = MemberList(prefix=options.prefix, stream=self.stream)

    @classmethod
    def create(cls, url: str, **options: object) -> NATSStore:
        """Build a store directly (tests, benchmarks); open it with ``await store.open()``."""
        parsed = StoreURL.parse(url)
        merged = {**parsed.options(), **options}
        return cls(parsed, structure_options(NATSOptions, merged, where=f"{parsed.scheme}://"))

    def __repr__(self) -> str:
        return (
            f"NATSStore({self.where!r}, stream={self.stream!r}, strategy={self.options.strategy!r})"
        )

    @property
    def capabilities(self) -> Capabilities:
        return attrs.evolve(self.strategy.capabilities, membership=True)

    # -- connection ------------------------------------------------------------------------------
    def _error(self, exc: BaseException) -> AnarchonError:
        return translate(exc, self.where, self._secrets, self._errors.last)

    async def _on_error(self, exc: Exception) -> None:
        log.debug("NATS at %s: %s", self.where, self._errors.add(exc))
        if self._nc is None and isinstance(exc, ssl.SSLError):
            # Opening, and the TLS handshake failed: trying again will not help, and nats-py
            # (2.16) would wait for ever closing that connection. Raised here, it ends the
            # connect at once (asyncio closed the socket when the handshake failed).
            raise exc
        nc = self._nc
        if nc is not None and not nc.is_connected and not nc.is_closed:
            # nats-py (2.16) leaves the socket of a failed reconnection attempt open and
            # replaces it on the next attempt; close it so an outage leaks no sockets.
            transport = getattr(nc, "_transport", None)
            if transport is not None:
                with contextlib.suppress(Exception):
                    transport.close()

    async def _on_disconnected(self) -> None:
        log.info("NATS at %s: connection lost; reconnecting", self.where)

    async def _on_reconnected(self) -> None:
        log.info("NATS at %s: reconnected", self.where)

    async def open(self) -> None:
        """Connect, then create the stream or check the existing one (`ConfigError` when its
        settings differ; it is never changed). `StoreUnavailable` when the server cannot be
        reached or refuses the login; the message never shows the password."""
        await self._open(read_only=False)

    async def open_read_only(self) -> None:
        """Connect and look the stream up, creating and changing nothing (R1): `StoreNotSetUp`
        when there is no stream of this name (the ``stream`` option, default
        ``ANARCHON_<prefix>``), `ConfigError` when it holds the other strategy's claims. Its
        windows and limits are not compared with the options. Afterwards `history` and `jobs`
        read with stream info and message get requests only, so a NATS user allowed nothing
        else on the stream can use them (see the backend's docs)."""
        await self._open(read_only=True)

    async def _open(self, *, read_only: bool) -> None:
        if self._nc is not None:
            return
        self._errors.clear()
        try:
            # Bounded as a whole, as well as each step: a connect that hangs in nats-py (its
            # handling of failed connections) fails with the errors reported so far.
            nc = await asyncio.wait_for(self._connect(), OPEN_STEPS * self._timeout + 1)
        except DRIVER_ERRORS as exc:
            tls = refused_tls(exc, self.where, tls=self.url.scheme == "tls")
            if tls is not None:
                raise tls from None
            reason, refused = self._errors.reason(exc)
            if refused:
                raise StoreUnavailable(
                    f"NATS at {self.where} refused the login ({reason}); check user and password "
                    "(or token), not shown"
                ) from None
            raise StoreUnavailable(
                f"NATS at {self.where} cannot be reached ({reason}); check host, port, user and "
                "password (not shown), and that the server runs with JetStream (-js)"
            ) from None
        nc.options["max_reconnect_attempts"] = -1
        try:
            link = Link(
                nc=nc,
                js=nc.jetstream(timeout=self._timeout),
                replies=Replies(nc),
                stream=self.stream,
                where=self.where,
                timeout=self._timeout,
                hidden=self._secrets,
                errors=self._errors,
            )
            if read_only:
                await self.strategy.find(link)
            else:
                await self.strategy.setup(link)
                await self._members.setup(link)
            await link.replies.start()
        except BaseException as exc:
            await nc.close()
            if isinstance(exc, Exception):
                raise self._error(exc) from None
            raise
        self._nc, self._link, self._read_only = nc, link, read_only

    async def _connect(self) -> Client:
        return await nats.connect(
            **self._kwargs,
            name="anarchon",
            connect_timeout=self._timeout,
            reconnect_time_wait=0.5,
            # Tried twice at start (the scheduler retries opening); once connected, it
            # reconnects for ever (set in `open`).
            max_reconnect_attempts=1,
            # No buffering while disconnected: a claim then fails at once instead of being
            # sent long after its caller gave up.
            pending_size=0,
            # Every subject is built here from checked names (prefix, job: ASCII letters, digits,
            # '_' and '-'); nats-py's check of each again costs 5-10% of a large batch.
            skip_subject_validation=True,
            error_cb=self._on_error,
            disconnected_cb=self._on_disconnected,
            reconnected_cb=self._on_reconnected,
        )

    async def close(self) -> None:
        nc, self._nc, self._link = self._nc, None, None
        if nc is not None and not nc.is_closed:
            await nc.close()

    def _opened(self) -> Link:
        if self._link is None:
            raise StoreUnavailable(f"{self!r} is not open: await store.open() first")
        return self._link

    def _writable(self) -> Link:
        link = self._opened()
        if self._read_only:
            raise ConfigError(
                f"{self!r} was opened read-only (open_read_only): it claims nothing; open it "
                "with open() to claim"
            )
        return link

    # -- claims and reads: the strategy's ------------------------------------------------------
    async def claim(self, request: ClaimRequest) -> Claim:
        """Publish the claim (C1: the stream stores one per run); a refusal or duplicate is read
        back and its token compared (C2). A request with a `skip_reason` publishes a skip in the
        same way: it takes the slot and answers `skipped`, and so does every later claim of the
        slot (S1). `late` with nothing published, by this instance's clock (T3, T4);
        `ConfigError` for a slot too far ahead (C5); `StoreUnavailable` on transport errors."""
        if self._read_only:
            self._writable()
        late = self.strategy.judge(request)
        if late is not None:
            return late
        return await self.strategy.claim(self._opened(), request)

    async def claim_many(self, requests: Sequence[ClaimRequest]) -> list[Claim]:
        """Every claim published at once, the acknowledgements awaited together; duplicates and
        refusals are then read back as in `claim`. Answers are in the order of `requests`.
        A request too far ahead of its slot (C5) raises `ConfigError` before anything is sent."""
        return await self.strategy.claim_many(self._writable(), requests)

    async def history(self, job: str, limit: int = 100) -> list[RunRecord]:
        """The job's claims still in the stream (kept for ``max_age_ms``), newest slot first."""
        if isinstance(limit, bool) or not isinstance(limit, int) or limit < 0:
            raise ConfigError(f"history limit must be an int >= 0, got {limit!r}")
        return await self.strategy.history(self._opened(), job, limit)

    async def jobs(self) -> list[str]:
        """`SupportsJobList`: the jobs with at least one claim in the stream (kept for
        ``max_age_ms``), sorted; one stream info request over the claims' subjects."""
        return await self.strategy.jobs(self._opened())

    async def now_ms(self) -> int | None:
        """None: NATS offers no clock; lateness is judged by the instance's clock (T4)."""
        return None

    # -- the fleet's member list (M1): `_members` --------------------------------------------------
    async def announce(
        self, instance: str, ttl_ms: int, stats: Mapping[str, int] | None = None
    ) -> Member:
        """M1: write or refresh `instance`, live for `ttl_ms` by this instance's clock (NATS has
        none to read); one publish while no other writer touches the member."""
        link = self._writable()
        try:
            return await self._members.announce(link, instance, ttl_ms, stats)
        except AnarchonError:
            raise
        except DRIVER_ERRORS as exc:
            raise self._error(exc) from None

    async def members(self) -> list[Member]:
        """M1: the live members by this instance's clock, sorted by instance; reads only (R1)."""
        link = self._opened()
        try:
            return await self._members.members(link)
        except AnarchonError:
            raise
        except DRIVER_ERRORS as exc:
            raise self._error(exc) from None

    async def leave(self, instance: str) -> bool:
        """M1: remove `instance` now; False if it was not a live member."""
        link = self._writable()
        try:
            return await self._members.leave(link, instance)
        except AnarchonError:
            raise
        except DRIVER_ERRORS as exc:
            raise self._error(exc) from None
