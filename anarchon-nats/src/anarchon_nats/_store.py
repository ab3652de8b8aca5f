"""`nats://` and `tls://`: claims decided by JetStream, without leases.

msg-id (default): every instance publishes the claim for (job, slot) with the same
``Nats-Msg-Id: <job>:<slot>``; the stream stores the first and answers the others with a
duplicate acknowledgement carrying the stored message's sequence, which is read back and its token
compared (C2). expected-seq: the claim goes to the slot's own subject with
``Nats-Expected-Last-Subject-Sequence: 0``, which only the first publish passes; a refusal reads
the subject's message back and compares tokens.
"""

from __future__ import annotations

import asyncio
import contextlib
import heapq
import logging
import ssl
import time
from collections.abc import Sequence
from typing import Any, ClassVar

import nats
from nats.aio.client import Client
from nats.js import JetStreamContext
from nats.js.api import DeliverPolicy
from nats.js.errors import APIError, NotFoundError

from anarchon import (
    AnarchonError,
    Capabilities,
    Claim,
    ClaimRequest,
    ClaimStore,
    ConfigError,
    Outcome,
    RunRecord,
    StoreCorrupt,
    StoreOptions,
    StoreUnavailable,
    StoreURL,
)

from ._batch import publish_all
from ._connection import (
    DRIVER_ERRORS,
    ConnectErrors,
    connect_kwargs,
    refused_tls,
    secrets,
    shown_url,
    translate,
)
from ._options import NATSOptions
from ._records import decode, encode
from ._stream import Subjects, ensure_stream

__all__ = ["NATSStore"]

log = logging.getLogger("anarchon.nats")

OPEN_STEPS = 8
"""Steps of `open`'s connect that may each take `timeout_ms`: two attempts of connect, INFO,
TLS and the first PING."""
ERR_WRONG_LAST_SEQUENCE = 10071
"""expected-seq: the slot's subject already holds a message."""
ERR_DUPLICATE_IN_PROCESS = 10158
"""A clustered stream has not decided a concurrent duplicate yet (HTTP-like code 409)."""
CONFLICT_RETRIES = 8
MSG_ID = "Nats-Msg-Id"
EXPECTED_LAST_SUBJECT_SEQ = "Nats-Expected-Last-Subject-Sequence"
_FIRST_ON_SUBJECT = {EXPECTED_LAST_SUBJECT_SEQ: "0"}
"""expected-seq's header, shared by every publish (nats-py does not change it)."""


def _wall_ms() -> int:
    return time.time_ns() // 1_000_000


def _in_process(exc: BaseException) -> bool:
    return isinstance(exc, APIError) and (
        exc.err_code == ERR_DUPLICATE_IN_PROCESS or (exc.code == 409 and exc.err_code is None)
    )


class NATSStore(ClaimStore):
    """Claim store on a NATS JetStream stream (DESIGN section 4, store facts: NATS).

    No leases: a claim is `won` or `lost` (or `late`). Lateness is judged by this instance's
    clock (T4): a slot older than ``max_late_ms``, or older than the stream remembers a run
    (`Capabilities.remembers_ms`), is `late` and nothing is published.
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
        self.subjects = Subjects(options.prefix, options.strategy)
        self.stream = options.stream_name
        self._timeout = options.timeout_ms / 1000
        self._nc: Client | None = None
        self._js: JetStreamContext | None = None
        self._errors = ConnectErrors(self._secrets)

    @classmethod
    def create(cls, url: str, **options: object) -> NATSStore:
        """Build a store directly (tests, benchmarks); open it with ``await store.open()``."""
        from anarchon._options import structure_options

        parsed = StoreURL.parse(url)
        merged = {**parsed.options(), **options}
        return cls(parsed, structure_options(NATSOptions, merged, where=f"{parsed.scheme}://"))

    def __repr__(self) -> str:
        return (
            f"NATSStore({self.where!r}, stream={self.stream!r}, strategy={self.options.strategy!r})"
        )

    @property
    def capabilities(self) -> Capabilities:
        return Capabilities(
            leases=False,
            self_recognition=True,
            fencing=False,
            overlap=False,
            history=True,
            store_clock=False,
            batch=True,
            remembers_ms=self.options.remembers_ms,
        )

    # -- connection ------------------------------------------------------------------------------
    def _error(self, exc: BaseException) -> AnarchonError:
        return translate(exc, self.where, self._secrets)

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
        js = nc.jetstream(timeout=self._timeout)
        try:
            await ensure_stream(js, self.options, self.where)
        except BaseException as exc:
            await nc.close()
            if isinstance(exc, Exception):
                raise self._error(exc) from None
            raise
        self._nc, self._js = nc, js

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
            error_cb=self._on_error,
            disconnected_cb=self._on_disconnected,
            reconnected_cb=self._on_reconnected,
        )

    async def close(self) -> None:
        nc, self._nc, self._js = self._nc, None, None
        if nc is not None and not nc.is_closed:
            await nc.close()

    def _jetstream(self) -> JetStreamContext:
        if self._js is None:
            raise StoreUnavailable(f"{self!r} is not open: await store.open() first")
        return self._js

    # -- claims ----------------------------------------------------------------------------------
    def _late(self, request: ClaimRequest) -> Claim | None:
        """T4 by this instance's clock; T3: never publish a slot the stream may have forgotten."""
        age = _wall_ms() - request.slot
        if age > request.max_late_ms:
            return Claim(
                outcome=Outcome.LATE,
                reason=f"the slot is {age} ms old by this instance's clock, more than max_late "
                f"({request.max_late_ms} ms)",
            )
        if age > self.options.remembers_ms:
            return Claim(
                outcome=Outcome.LATE,
                reason=f"the slot is {age} ms old, older than stream {self.stream} remembers a run "
                f"({self.options.remembers_ms} ms, T3)",
            )
        return None

    def _headers(self, request: ClaimRequest) -> dict[str, str]:
        if self.options.strategy == "msg-id":
            return {MSG_ID: f"{request.job}:{request.slot}"}
        return _FIRST_ON_SUBJECT

    @staticmethod
    def _won(request: ClaimRequest) -> Claim:
        return Claim(outcome=Outcome.WON, attempt=1, token=request.token, holder=request.instance)

    async def claim(self, request: ClaimRequest) -> Claim:
        """Publish the claim (C1: the stream stores one per run); a refusal or duplicate is read
        back and its token compared (C2). `StoreUnavailable` on transport errors."""
        late = self._late(request)
        if late is not None:
            return late
        js = self._jetstream()
        subject = self.subjects.claim(request.job, request.slot)
        body = encode(request)
        try:
            for attempt in range(CONFLICT_RETRIES):
                try:
                    ack = await js.publish(
                        subject, body, timeout=self._timeout, headers=self._headers(request)
                    )
                except APIError as exc:
                    if _in_process(exc):
                        await asyncio.sleep(0.005 * 2**attempt)
                        continue
                    if exc.err_code == ERR_WRONG_LAST_SEQUENCE:
                        return await self._read_back(js, request, None)
                    raise
                if ack.duplicate:
                    return await self._read_back(js, request, ack.seq)
                return self._won(request)
        except AnarchonError:
            raise
        except DRIVER_ERRORS as exc:
            raise self._error(exc) from None
        raise StoreUnavailable(
            f"NATS at {self.where}: stream {self.stream} has not decided a concurrent duplicate "
            f"of {request.job}@{request.slot} yet; the claim may be resent with the same token"
        )

    async def _read_back(
        self, js: JetStreamContext, request: ClaimRequest, seq: int | None
    ) -> Claim:
        """The stored claim for the run: mine is `won` (a resend, C2), another token's is `lost`;
        gone (aged out or deleted) is `lost` as well, never `won` (C3)."""
        try:
            if seq is not None:
                msg = await js.get_msg(self.stream, seq=seq)
            else:
                msg = await js.get_last_msg(
                    self.stream, self.subjects.claim(request.job, request.slot)
                )
        except NotFoundError:
            return Claim(
                outcome=Outcome.LOST,
                reason=f"the stream knows the run was claimed, but its message is gone from "
                f"stream {self.stream}",
            )
        record = decode(msg.data, stream=self.stream, seq=msg.seq, when=msg.time)
        if record.job != request.job or record.slot != request.slot:
            raise StoreCorrupt(
                f"message {msg.seq} of stream {self.stream} holds {record.job}@{record.slot}, "
                f"expected {request.job}@{request.slot}"
            )
        if record.token == request.token:
            return self._won(request)
        return Claim(outcome=Outcome.LOST, attempt=1, token=record.token, holder=record.holder)

    async def claim_many(self, requests: Sequence[ClaimRequest]) -> list[Claim]:
        """Every claim published at once, the acknowledgements awaited together; duplicates and
        refusals are then read back as in `claim`. Answers are in the order of `requests`."""
        answers: list[Claim | None] = [self._late(r) for r in requests]
        js = self._jetstream()
        todo = [i for i, answer in enumerate(answers) if answer is None]
        try:
            nc = self._nc
            assert nc is not None
            acks = await publish_all(
                nc,
                [
                    (
                        self.subjects.claim(requests[i].job, requests[i].slot),
                        encode(requests[i]),
                        self._headers(requests[i]),
                    )
                    for i in todo
                ],
                timeout=self._timeout,
                where=self.where,
            )
        except AnarchonError:
            raise
        except DRIVER_ERRORS as exc:
            raise self._error(exc) from None
        again: dict[int, Any] = {}
        for i, ack in zip(todo, acks, strict=True):
            error = ack.get("error")
            if error is None:
                if ack.get("duplicate"):
                    again[i] = self._read_back(js, requests[i], int(ack["seq"]))
                else:
                    answers[i] = self._won(requests[i])
            elif error.get("err_code") in (ERR_WRONG_LAST_SEQUENCE, ERR_DUPLICATE_IN_PROCESS):
                again[i] = self.claim(requests[i])
            else:
                for coroutine in again.values():
                    coroutine.close()
                raise self._error(APIError(**error))
        if again:
            try:
                decided = await asyncio.gather(*again.values())
            except AnarchonError:
                raise
            except DRIVER_ERRORS as exc:
                raise self._error(exc) from None
            for i, claim in zip(again, decided, strict=True):
                answers[i] = claim
        result = [a for a in answers if a is not None]
        assert len(result) == len(requests)
        return result

    # -- reads -----------------------------------------------------------------------------------
    async def history(self, job: str, limit: int = 100) -> list[RunRecord]:
        """The job's claims still in the stream (kept for ``max_age_ms``), newest slot first."""
        if isinstance(limit, bool) or not isinstance(limit, int) or limit < 0:
            raise ConfigError(f"history limit must be an int >= 0, got {limit!r}")
        js = self._jetstream()
        subject = self.subjects.job(job)
        try:
            info = await js.stream_info(self.stream, subjects_filter=subject)
            total = sum((info.state.subjects or {}).values())
            if total == 0 or limit == 0:
                return []
            newest: list[tuple[int, int, RunRecord]] = []
            sub = await js.subscribe(
                subject,
                stream=self.stream,
                ordered_consumer=True,
                deliver_policy=DeliverPolicy.ALL,
            )
            try:
                while True:
                    msg = await sub.next_msg(timeout=self._timeout)
                    meta = msg.metadata
                    run = decode(
                        msg.data, stream=self.stream, seq=meta.sequence.stream, when=meta.timestamp
                    )
                    item = (run.slot, meta.sequence.stream, run)
                    if len(newest) < limit:
                        heapq.heappush(newest, item)
                    else:
                        heapq.heappushpop(newest, item)
                    if meta.num_pending == 0:
                        break
            finally:
                await sub.unsubscribe()
        except AnarchonError:
            raise
        except DRIVER_ERRORS as exc:
            raise self._error(exc) from None
        return [run for _, _, run in sorted(newest, reverse=True)]

    async def now_ms(self) -> int | None:
        """None: NATS offers no clock; lateness is judged by the instance's clock (T4)."""
        return None
