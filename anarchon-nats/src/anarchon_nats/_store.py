"""`nats://` and `tls://`: claims decided by JetStream, without leases.

msg-id (default): every instance publishes the claim for (job, slot) with the same
``Nats-Msg-Id: <job>:<slot>``; the stream stores the first and answers the others with a
duplicate acknowledgement carrying the stored message's sequence, which is read back and its token
compared (C2). expected-seq: the claim goes to the slot's own subject with
``Nats-Expected-Last-Subject-Sequence: 0``, which only the first publish passes; a refusal reads
the subject's message back and compares tokens. A request with a `skip_reason` publishes, in the
same way, a skip message (`_records`) that takes the slot: the ledger (S1) as NATS keeps it.

A single claim's publish and read-back are requests on the store's own reply subscription
(`_replies`), and their answers are read by `_answers`; nats-py's JetStream context serves the
stream's setup and `history`.
"""

from __future__ import annotations

import asyncio
import contextlib
import heapq
import json
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
from anarchon._runs import HistoryReader

from ._answers import Acks, OtherStream, read_stored
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
from ._records import answer_from, decode, encode, taken
from ._replies import Replies
from ._stream import Subjects, ensure_stream
from ._timing import judge_time

__all__ = ["NATSStore"]

log = logging.getLogger("anarchon.nats")

OPEN_STEPS = 8
"""Steps of `open`'s connect that may each take `timeout_ms`: two attempts of connect, INFO,
TLS and the first PING."""
JS_API = "$JS.API"
"""The JetStream API's subject prefix (no domain), as nats-py's ``jetstream()`` uses it."""
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
        self.subjects = Subjects(options.prefix, options.strategy)
        self.stream = options.stream_name
        self._timeout = options.timeout_ms / 1000
        self._nc: Client | None = None
        self._js: JetStreamContext | None = None
        self._replies: Replies | None = None
        self._acks = Acks(self.stream)
        self._get_api = f"{JS_API}.STREAM.MSG.GET.{self.stream}"
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
            skips=True,
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
        replies = Replies(nc)
        try:
            await replies.start()
        except BaseException as exc:
            await nc.close()
            if isinstance(exc, Exception):
                raise self._error(exc) from None
            raise
        self._nc, self._js, self._replies = nc, js, replies

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
        nc, self._nc, self._js, self._replies = self._nc, None, None, None
        if nc is not None and not nc.is_closed:
            await nc.close()

    def _not_open(self) -> StoreUnavailable:
        return StoreUnavailable(f"{self!r} is not open: await store.open() first")

    def _client(self) -> Client:
        if self._nc is None:
            raise self._not_open()
        return self._nc

    def _jetstream(self) -> JetStreamContext:
        if self._js is None:
            raise self._not_open()
        return self._js

    def _open_replies(self) -> Replies:
        if self._replies is None:
            raise self._not_open()
        return self._replies

    # -- claims ----------------------------------------------------------------------------------
    def _judge_time(self, request: ClaimRequest) -> Claim | None:
        """`late` or None by this instance's clock; `ConfigError` for a claim too far ahead of
        its slot for the stream to remember it (C5, `_timing`)."""
        return judge_time(request, _wall_ms(), self.options.remembers_ms, self.stream)

    def _headers(self, request: ClaimRequest) -> dict[str, str]:
        if self.options.strategy == "msg-id":
            return {MSG_ID: f"{request.job}:{request.slot}"}
        return _FIRST_ON_SUBJECT

    def _captured(self, stream: object) -> StoreCorrupt:
        """A claim stored by another stream: ours was deleted and another now takes the claims'
        subjects, so read-backs (C2) would look in the wrong place."""
        return StoreCorrupt(
            f"NATS at {self.where}: stream {stream!r}, not {self.stream}, took a claim on "
            f"{self.subjects.pattern}; stream {self.stream} was deleted or replaced: remove the "
            "other stream's subjects or use another prefix"
        )

    async def claim(self, request: ClaimRequest) -> Claim:
        """Publish the claim (C1: the stream stores one per run); a refusal or duplicate is read
        back and its token compared (C2). A request with a `skip_reason` publishes a skip in the
        same way: it takes the slot and answers `skipped`, and so does every later claim of the
        slot (S1). `ConfigError` for a slot too far ahead (C5); `StoreUnavailable` on transport
        errors."""
        late = self._judge_time(request)
        if late is not None:
            return late
        replies = self._open_replies()
        subject = self.subjects.claim(request.job, request.slot)
        body = encode(request)
        try:
            for attempt in range(CONFLICT_RETRIES):
                try:
                    answer = await replies.request(
                        subject, body, self._headers(request), self._timeout
                    )
                    seq, duplicate = self._acks.read(answer)
                except APIError as exc:
                    if _in_process(exc):
                        await asyncio.sleep(0.005 * 2**attempt)
                        continue
                    if exc.err_code == ERR_WRONG_LAST_SEQUENCE:
                        return await self._read_back(request, None)
                    raise
                except OtherStream as exc:
                    raise self._captured(exc.stream) from None
                if duplicate:
                    return await self._read_back(request, seq)
                return taken(request, _wall_ms())
        except AnarchonError:
            raise
        except DRIVER_ERRORS as exc:
            raise self._error(exc) from None
        raise StoreUnavailable(
            f"NATS at {self.where}: stream {self.stream} has not decided a concurrent duplicate "
            f"of {request.job}@{request.slot} yet; the claim may be resent with the same token"
        )

    async def _read_back(self, request: ClaimRequest, seq: int | None) -> Claim:
        """The stored claim for the run: a skip is `skipped` (S1), mine is `won` (a resend, C2),
        another token's is `lost`; gone (aged out or deleted) is `lost` as well, never `won`
        (C3)."""
        replies = self._open_replies()
        if seq is not None:
            query: dict[str, Any] = {"seq": seq}
        else:
            query = {"last_by_subj": self.subjects.claim(request.job, request.slot)}
        try:
            answer = await replies.request(
                self._get_api, json.dumps(query).encode(), None, self._timeout
            )
            stored, data = read_stored(answer)
        except NotFoundError:
            return Claim(
                outcome=Outcome.LOST,
                reason=f"the stream knows the run was claimed, but its message is gone from "
                f"stream {self.stream}",
            )
        record = decode(data, stream=self.stream, seq=stored)
        if record.job != request.job or record.slot != request.slot:
            raise StoreCorrupt(
                f"message {stored} of stream {self.stream} holds {record.job}@{record.slot}, "
                f"expected {request.job}@{request.slot}"
            )
        return answer_from(record, request)

    async def claim_many(self, requests: Sequence[ClaimRequest]) -> list[Claim]:
        """Every claim published at once, the acknowledgements awaited together; duplicates and
        refusals are then read back as in `claim`. Answers are in the order of `requests`.
        A request too far ahead of its slot (C5) raises `ConfigError` before anything is sent."""
        nc = self._client()
        answers: list[Claim | None] = [self._judge_time(r) for r in requests]
        todo = [i for i, answer in enumerate(answers) if answer is None]
        try:
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
                self._acks,
                timeout=self._timeout,
                where=self.where,
            )
        except AnarchonError:
            raise
        except DRIVER_ERRORS as exc:
            raise self._error(exc) from None
        again: dict[int, Any] = {}
        for i, ack in zip(todo, acks, strict=True):
            if isinstance(ack, tuple):
                seq, duplicate = ack
                if duplicate:
                    again[i] = self._read_back(requests[i], seq)
                else:
                    answers[i] = taken(requests[i], _wall_ms())
            elif isinstance(ack, APIError) and ack.err_code in (
                ERR_WRONG_LAST_SEQUENCE,
                ERR_DUPLICATE_IN_PROCESS,
            ):
                again[i] = self.claim(requests[i])
            else:
                for coroutine in again.values():
                    coroutine.close()
                if isinstance(ack, OtherStream):
                    raise self._captured(ack.stream)
                raise self._error(ack)
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
            # A message that is not one of ours is reported with the runs (`DamagedHistory`),
            # the first `limit` of them.
            reader = HistoryReader(job)
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
                    seq = meta.sequence.stream
                    try:
                        run = decode(msg.data, stream=self.stream, seq=seq, when=meta.timestamp)
                        if run.job != job:
                            raise StoreCorrupt(
                                f"message {seq} of stream {self.stream} on subject "
                                f"{msg.subject} holds a claim of job {run.job!r}, not {job!r}: "
                                "another program published it; remove the message"
                            )
                    except StoreCorrupt as exc:
                        if len(reader.damaged) < limit:
                            reader.damage(
                                f"message {seq} of stream {self.stream}",
                                str(exc),
                                slot=self.subjects.slot_of(msg.subject),
                            )
                    else:
                        item = (run.slot, seq, run)
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
        return reader.result([run for _, _, run in sorted(newest, reverse=True)])

    async def now_ms(self) -> int | None:
        """None: NATS offers no clock; lateness is judged by the instance's clock (T4)."""
        return None
