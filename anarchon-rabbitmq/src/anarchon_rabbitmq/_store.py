"""`amqp://` and `amqps://`: each run is a durable classic queue that holds at most one message;
the claim that fills it wins. One round trip per claim: the queue's declaration (no-wait) and the
claim's publish leave together, and the publisher confirm answers both. The scheduler has the
queues declared (and warmed up, see `_queues.WARM_UP`) ahead of their slot (`prepare`), so that
the winning claim does not wait for the broker to create one; the claim of a queue this store
prepared is the publish alone.

Opened read-only (`RabbitMQStore.open_read_only`, R1) it declares nothing; the job list comes
from the management plugin's HTTP API (`_management`, which says why).

A little over 400 lines: the claim's path (publish, confirm, and judging an answer that may be
ambiguous, C3) reads best in one place; the connection is `_link`, the queues `_queues`."""

from __future__ import annotations

import asyncio
import collections
import logging
import time
from collections.abc import Sequence
from typing import ClassVar

import aiormq
from aiormq.abc import AbstractChannel

from anarchon import (
    Capabilities,
    Claim,
    ClaimRequest,
    ClaimStore,
    ConfigError,
    Outcome,
    RunRecord,
    StoreOptions,
    StoreUnavailable,
    StoreURL,
)
from anarchon.backend import judge_window, structure_options

from ._link import Link, broken, ignore_result
from ._management import Management, cannot_list
from ._options import RabbitMQOptions
from ._queues import (
    claim_body,
    claim_properties,
    explain_refusal,
    queue_arguments,
    queue_name,
)

__all__ = ["RabbitMQStore"]

log = logging.getLogger("anarchon.rabbitmq")

UNSETTLED_KEPT = 10_000
"""Tokens whose claim was sent without an answer, remembered so a resend that finds the queue
full says `unknown` (the stored claim may be its own) instead of `lost`."""
OPEN_TRIES = 3


def _wall_ms() -> int:
    return time.time_ns() // 1_000_000


MAX_IN_FLIGHT = 256
"""Claims one store has on the wire at once; more wait their turn (see `RabbitMQStore.claim`)."""


class RabbitMQStore(ClaimStore):
    """A claim store without leases on RabbitMQ (DESIGN section 4, "Store facts: RabbitMQ").

    ``claim`` declares ``<prefix>.<job>.slot.<slot>`` (durable, classic, ``x-max-length: 1``,
    ``x-overflow: reject-publish``, ``x-expires: slot_ttl_ms``) and publishes the claim to it on a
    confirm channel, mandatory: ack is `won`, nack (the queue is full) is `lost` (C1: the broker
    handles one queue's publishes in order). Nothing ever consumes a claim queue.

    There is no self-recognition (C3): a claim whose confirm never came is checked with a passive
    declare. An empty queue proves it was not stored (`StoreUnavailable`: resend it); a full one
    may hold it (`unknown`, never `won`). If the broker cannot be reached to check, the claim is
    `StoreUnavailable` and its token is remembered, so the resend answers `unknown` when it finds
    the queue full and `won` only when its own publish filled the empty queue.

    No store clock: lateness is judged by this instance's clock (T4), and a slot older than
    `Capabilities.remembers_ms` is `late` whatever ``max_late`` says, because the broker may have
    forgotten it; a slot too far ahead is refused (C5, `anarchon.backend.judge_window`): when a
    queue made now could expire before ``slot + max_late_ms``.

    A request with a `skip_reason` fills the queue with a skip message carrying the reason
    (``"skip"`` in the body): it answers `skipped`, and nobody can win the slot after it.

    `prepare` (`anarchon.abc.SupportsPrepare`) declares the queues of a coming slot ahead of it:
    creating a durable queue costs the broker several times a publish, and ahead of the slot it
    costs no claim anything. It also warms each queue up with a message that expires on arrival
    (`_queues.WARM_UP`), so that the winning claim is not the queue's first persistent message.
    It decides nothing (an empty queue is no claim). A queue expires
    ``slot_ttl_ms`` after it was created: the claims declare it no-wait, and RabbitMQ restarts
    the expiry only for a declaration it answers. So a prepared run is remembered
    ``slot_ttl_ms - prepare_ahead_ms`` after its slot (`Capabilities.remembers_ms`, T3), and
    `prepare` declares nothing for a slot further ahead than that.
    """

    Options: ClassVar[type[StoreOptions]] = RabbitMQOptions

    def __init__(self, url: StoreURL, options: StoreOptions) -> None:
        if not isinstance(options, RabbitMQOptions):
            raise TypeError(f"RabbitMQStore needs RabbitMQOptions, got {type(options).__name__}")
        if url.scheme not in ("amqp", "amqps"):
            raise ConfigError(f"RabbitMQ URL {url} must start with amqp:// or amqps://")
        if not url.host:
            raise ConfigError(f"RabbitMQ URL {url} has no host: write amqp://user:pass@host:5672/")
        self.url = url
        self.options: RabbitMQOptions = options
        self._link = Link(url, options)
        self._arguments = queue_arguments(options.slot_ttl_ms)
        self._unsettled: collections.OrderedDict[str, None] = collections.OrderedDict()
        self._closed = False
        self._in_flight = asyncio.Semaphore(MAX_IN_FLIGHT)
        self._prepared: dict[str, int] = {}
        """Queues this store prepared (name -> slot), whose claim need not declare them again."""
        self._read_only = False
        self._management = Management(url, options) if options.management_url is not None else None

    @classmethod
    def create(cls, url: str, **options: object) -> RabbitMQStore:
        """Build a store directly (tests, examples); open it with ``await store.open()``."""
        parsed = StoreURL.parse(url)
        merged = {**parsed.options(), **options}
        opts = structure_options(RabbitMQOptions, merged, where=f"{parsed.scheme}://")
        return cls(parsed, opts)

    def __repr__(self) -> str:
        return f"RabbitMQStore({self._link.shown!r}, prefix={self.options.prefix!r})"

    @property
    def capabilities(self) -> Capabilities:
        return Capabilities(
            leases=False,
            self_recognition=False,
            fencing=False,
            overlap=False,
            history=False,
            store_clock=False,
            # A skip takes the queue like a claim, but a queue is never read: later claims of
            # the slot answer `lost`, and there is no history to show it in.
            skips=False,
            batch=False,
            # A queue expires slot_ttl_ms after its creation (the claims' no-wait declarations
            # do not restart the timer); a prepared one is created up to prepare_ahead_ms early.
            remembers_ms=self.options.slot_ttl_ms - self.prepare_ahead_ms,
        )

    async def open(self) -> None:
        """Connect and open a confirm channel, retrying briefly. Nothing is created up front:
        each run's queue is declared by its claims."""
        self._read_only = False
        await self._connect()

    async def _connect(self) -> None:
        self._closed = False
        for attempt in range(1, OPEN_TRIES + 1):
            try:
                await self._link.ensure()
                return
            except StoreUnavailable:
                if attempt == OPEN_TRIES:
                    raise
                await asyncio.sleep(0.2 * attempt)

    async def open_read_only(self) -> None:
        """Connect, declaring nothing (R1): no queue, not even passively (a declaration the
        broker answers restarts a queue's expiry). With ``management_url``, the API is asked for
        the prefix's run queues, and `StoreNotSetUp` says when there are none; without it,
        AMQP cannot tell, and only the login and virtual host are checked. RabbitMQ keeps no
        history (`capabilities.history` is False): `history` is empty; `jobs` needs
        ``management_url``."""
        self._read_only = True
        await self._connect()
        if self._management is not None:
            await self._management.require_runs(self._link.shown, self.options.slot_ttl_ms)

    async def jobs(self) -> list[str]:
        """`SupportsJobList`: the jobs with a run queue that still exists (RabbitMQ remembers a
        run ``slot_ttl_ms`` after its queue was made), sorted, from the management API
        (``management_url``; AMQP cannot list queues). `ConfigError` without that option."""
        if self._management is None:
            raise cannot_list(self._link.shown)
        return await self._management.jobs()

    def _writable(self) -> None:
        if self._read_only:
            raise ConfigError(
                f"{self!r} was opened read-only (open_read_only): it claims and prepares "
                "nothing; open it with open() to claim"
            )

    async def close(self) -> None:
        self._closed = True
        await self._link.close()

    async def now_ms(self) -> int | None:
        """None: RabbitMQ has no clock to read (T4: lateness by the instance's clock)."""
        return None

    @property
    def prepare_ahead_ms(self) -> int:
        """``prepare_ahead_ms``, at most half of ``slot_ttl_ms`` (a queue declared earlier could
        expire before its slot)."""
        return min(self.options.prepare_ahead_ms, self.options.slot_ttl_ms // 2)

    async def prepare(self, jobs: Sequence[str], slot: int) -> None:
        """Declare the runs' queues of `jobs` at `slot` now, on a channel of their own, so that
        the claims at the slot find them made; from the slot on, the claims declare whatever is
        left. Nothing for a slot more than `prepare_ahead_ms` ahead by this instance's clock:
        its queue would be forgotten sooner than `remembers_ms` says. Raises what a claim's declaration would: `StoreUnavailable`, `StoreCorrupt` for a
        foreign queue of the same name, `ConfigError` for missing permissions."""
        self._writable()
        if self._closed:
            raise StoreUnavailable(f"the RabbitMQ store {self._link.shown} is closed")
        if not jobs or slot - _wall_ms() > self.prepare_ahead_ms:
            return
        queues = [queue_name(self.options.prefix, job, slot) for job in jobs]
        self._forget_prepared()
        try:
            # Once the slot has come, its claims declare the rest of the queues themselves.
            await self._link.declare(
                queues,
                self._arguments,
                until=lambda: _wall_ms() >= slot,
                declared=lambda batch: self._prepared.update(dict.fromkeys(batch, slot)),
            )
        except aiormq.exceptions.ChannelClosed as exc:
            refused = next((q for q in queues if f"'{q}'" in str(exc)), None)
            if refused is None:
                raise self._link.unavailable(
                    f"preparing {len(queues)} queue(s) failed", exc
                ) from None
            raise self._refusal(exc, refused) from None

    def _forget_prepared(self) -> None:
        """Drop the prepared queues whose slot is so old that no claim will come (the claim of
        a prepared queue takes its entry): the memory stays bounded by what is still ahead."""
        horizon = _wall_ms() - self.options.slot_ttl_ms
        for name in [name for name, slot in self._prepared.items() if slot < horizon]:
            del self._prepared[name]

    async def history(self, job: str, limit: int = 100) -> list[RunRecord]:
        """Always empty: a claim queue is never read (reading would consume the claim), so
        RabbitMQ keeps no history anarchon could show (`capabilities.history` is False)."""
        return []

    # -- the claim ------------------------------------------------------------------------------
    async def claim(self, request: ClaimRequest) -> Claim:
        """Fill the run's queue: ack is `won` (or `skipped` for a request with a `skip_reason`,
        whose message then holds the slot, so that nobody can win it; later claims answer
        `lost`: a claim queue is never read). `late` without touching the broker by this
        instance's clock; `ConfigError` for a slot so far ahead that its queue could expire
        while the slot can still be claimed (C5, `anarchon.backend.judge_window`)."""
        self._writable()
        now = _wall_ms()
        late = judge_window(
            request,
            now,
            remembers_ms=self.options.slot_ttl_ms - self.prepare_ahead_ms,
            memory=f"RabbitMQ (slot_ttl {self.options.slot_ttl_ms} ms less the preparation lead)",
            # A queue this claim makes lives slot_ttl_ms; one `prepare` made earlier (at most
            # prepare_ahead_ms before the slot) lives to slot + remembers_ms.
            written_ms=self.options.slot_ttl_ms,
        )
        if late is not None:
            return late
        if self._closed:
            raise StoreUnavailable(f"the RabbitMQ store {self._link.shown} is closed")
        # At most MAX_IN_FLIGHT claims on the wire: RabbitMQ creates a few hundred queues a
        # second, so a burst of thousands would otherwise outlast the confirm timeout (C3:
        # every one `unknown`). The timeout starts when a claim is sent, not while it waits.
        async with self._in_flight:
            return await self._claim(request, now)

    async def _claim(self, request: ClaimRequest, now: int) -> Claim:
        queue = queue_name(self.options.prefix, request.job, request.slot)
        channel = await self._link.channel()
        # A queue this store prepared exists as declared (and lives slot_ttl_ms from then, T3):
        # its claim is the publish alone. Should it be gone after all, the publish comes back
        # unrouted (mandatory), nothing is stored, and the resend declares it.
        prepared = self._prepared.pop(queue, None) is not None
        try:
            if not prepared:
                await channel.queue_declare(
                    queue, durable=True, nowait=True, arguments=self._arguments
                )
        except Exception as exc:
            if not broken(exc):
                raise
            raise self._link.unavailable(f"the claim of {queue} was not sent", exc) from None
        # From here on the claim may reach the broker: a lost answer is never `won` (C3).
        publishing = asyncio.ensure_future(self._publish(channel, queue, request, now))
        # The channel's closing too: aiormq rejects a publish that awaits its confirm when the
        # connection drops, but not one still waiting to be written (for the channel's lock or
        # room in the connection's write queue, which nothing drains any more). Such a publish
        # would hang until the confirm timeout and turn a claim the broker never saw into
        # `unknown`: a missed run, although the store could have resent it at once.
        closing = channel.closing
        closing.add_done_callback(ignore_result)
        try:
            await asyncio.wait(
                {publishing, closing},
                timeout=self.options.confirm_timeout_ms / 1000,
                return_when=asyncio.FIRST_COMPLETED,
            )
        except asyncio.CancelledError:
            self._remember(request.token)
            raise
        finally:
            closing.cancel()  # only this observer: the channel stays as it is
        if publishing.done():
            return await self._decide(publishing, queue, request)
        publishing.add_done_callback(ignore_result)
        if channel.is_closed:
            # Closed under the claim, its confirm not in: the publish may or may not have left.
            # Judged by why the channel closed (a refused declaration is the broker's answer).
            publishing.cancel()
            reason = _close_reason(channel)
            if reason is not None and broken(reason):
                return await self._judge(reason, queue, request)
            return await self._settle(request, queue, "the channel closed before the confirm")
        self._remember(request.token)
        return Claim(
            outcome=Outcome.UNKNOWN,
            reason=f"RabbitMQ did not confirm the claim of {queue} within "
            f"{self.options.confirm_timeout_ms} ms; it may have been stored (C3)",
        )

    @staticmethod
    async def _publish(
        channel: AbstractChannel, queue: str, request: ClaimRequest, now: int
    ) -> object:
        return await channel.basic_publish(
            claim_body(request, now),
            routing_key=queue,
            properties=claim_properties(request, now),
            mandatory=True,
        )

    async def _decide(
        self, publishing: asyncio.Future[object], queue: str, request: ClaimRequest
    ) -> Claim:
        if publishing.cancelled():
            return await self._settle(request, queue, "the channel closed before the confirm")
        exc = publishing.exception()
        if exc is None:
            self._unsettled.pop(request.token, None)
            if request.skip_reason is not None:
                # S1 as far as RabbitMQ goes: the skip holds the queue; nothing reads it back.
                return Claim(
                    outcome=Outcome.SKIPPED,
                    attempt=0,
                    token=request.token,
                    holder=request.instance,
                    reason=request.skip_reason,
                )
            return Claim(
                outcome=Outcome.WON, attempt=1, token=request.token, holder=request.instance
            )
        return await self._judge(exc, queue, request)

    async def _judge(self, exc: BaseException, queue: str, request: ClaimRequest) -> Claim:
        """The claim by the error that ended its publish (or closed its channel)."""
        if isinstance(exc, aiormq.exceptions.PublishError):
            # Returned unroutable: the queue vanished between declare and publish; not stored.
            raise self._link.unavailable(f"the claim of {queue} was returned unrouted", exc)
        if isinstance(exc, aiormq.exceptions.DeliveryError):
            if request.token in self._unsettled:
                return Claim(
                    outcome=Outcome.UNKNOWN,
                    reason=f"queue {queue} is full, and an earlier send of this token got no "
                    "answer: the stored claim may be this one (RabbitMQ cannot tell, C3)",
                )
            return Claim(outcome=Outcome.LOST, reason=f"queue {queue} already holds a claim")
        if isinstance(
            exc,
            (aiormq.exceptions.ChannelPreconditionFailed, aiormq.exceptions.ChannelAccessRefused),
        ) and f"'{queue}'" in str(exc):
            raise self._refusal(exc, queue) from None
        if isinstance(exc, aiormq.exceptions.ChannelNotFoundEntity) and f"'{queue}'" in str(exc):
            # The claim's own declaration failed (RabbitMQ 3.10 answers one that races another
            # instance's creation of the queue with "home node ... is down"): the broker closed
            # the channel before the publish behind it, so nothing was stored. Resend it.
            raise self._link.unavailable(f"RabbitMQ did not declare {queue}; resend", exc)
        if broken(exc):
            return await self._settle(request, queue, f"{type(exc).__name__} before the confirm")
        raise exc

    def _refusal(self, exc: BaseException, queue: str) -> Exception:
        """The broker's refusal to declare `queue` as a claim queue, as anarchon's error."""
        if isinstance(exc, aiormq.exceptions.ChannelAccessRefused):
            return ConfigError(
                f"RabbitMQ at {self._link.shown} refused queue {queue!r}: "
                f"{self._link.scrub(str(exc))}. The user needs configure and write "
                f"permissions on queues named '{self.options.prefix}\\..*' (never read)"
            )
        if isinstance(exc, aiormq.exceptions.ChannelPreconditionFailed):
            return explain_refusal(queue, self._link.scrub(str(exc)), self.options.slot_ttl_ms)
        return self._link.unavailable(f"the broker closed the channel declaring {queue!r}", exc)

    async def _settle(self, request: ClaimRequest, queue: str, cause: str) -> Claim:
        """The claim was sent and its answer lost: find out whether it can have been stored."""
        self._remember(request.token)
        try:
            count = await self._link.message_count(queue)
        except StoreUnavailable as exc:
            raise StoreUnavailable(
                f"{exc} ({cause}; resend with the same token: if the claim was stored, the "
                "resend is unknown, never won)"
            ) from None
        if count == 0:
            raise self._link.unavailable(
                f"the claim of {queue} was not stored ({cause}); resend it"
            )
        log.info("claim of %s: unknown (%s)", queue, cause, extra={"job": request.job})
        return Claim(
            outcome=Outcome.UNKNOWN,
            reason=f"{cause}, and queue {queue} holds a claim that may be this one (C3)",
        )

    def _remember(self, token: str) -> None:
        self._unsettled[token] = None
        self._unsettled.move_to_end(token)
        while len(self._unsettled) > UNSETTLED_KEPT:
            self._unsettled.popitem(last=False)


def _close_reason(channel: AbstractChannel) -> BaseException | None:
    """Why a closed channel closed: the broker's Channel.Close, or the connection's failure."""
    closed = channel.closing  # the channel's own closing future, once it is done
    if not closed.done() or closed.cancelled():
        return None
    return closed.exception()
