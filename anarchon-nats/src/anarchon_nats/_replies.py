"""A claim's requests (its publish, its read-back) and their answers, on one reply subscription
per connection.

nats-py's JetStream ``publish`` and ``get_msg`` go through its generic ``request``: a fresh reply
token per call (a NUID and random bytes), ``asyncio.wait_for`` (one more turn of the event loop
before the caller wakes), then a ``PubAck`` or a ``RawStreamMsg`` built field by field. On a
two-core machine where a publish is bound by the client's CPU, that is about a fifth of a claim.
Here the inbox is subscribed once, each request takes the next number under it, and the caller
waits on its own future with a timer; the answer's bytes are read by `_answers`.
"""

from __future__ import annotations

import asyncio
import itertools

import nats.errors
from nats.aio.client import Client
from nats.aio.msg import Msg

__all__ = ["Replies"]


def _expire(future: asyncio.Future[Msg]) -> None:
    if not future.done():
        future.set_exception(nats.errors.TimeoutError())  # as nats-py's request raises it


class Replies:
    """Requests that wait for an answer, all answered on one wildcard subscription.

    nats-py subscribes it again after a reconnection, like its own request inbox. An answer that
    comes after its publish gave up finds no future and is dropped.
    """

    def __init__(self, nc: Client) -> None:
        self._nc = nc
        self._prefix = nc.new_inbox() + "."
        self._waiting: dict[str, asyncio.Future[Msg]] = {}
        self._numbers = itertools.count()

    async def start(self) -> None:
        await self._nc.subscribe(self._prefix + "*", cb=self._on_reply)

    @property
    def waiting(self) -> int:
        """Requests still waiting for their answer."""
        return len(self._waiting)

    async def _on_reply(self, msg: Msg) -> None:
        future = self._waiting.pop(msg.subject, None)
        if future is not None and not future.done():
            future.set_result(msg)

    async def request(
        self, subject: str, body: bytes, headers: dict[str, str] | None, timeout: float
    ) -> bytes:
        """Publish with a reply subject of our inbox and wait up to `timeout` s for the answer's
        body; nats-py's `TimeoutError` when none comes."""
        reply = self._prefix + str(next(self._numbers))
        loop = asyncio.get_running_loop()
        future: asyncio.Future[Msg] = loop.create_future()
        self._waiting[reply] = future
        timer = loop.call_later(timeout, _expire, future)
        try:
            await self._nc.publish(subject, body, reply=reply, headers=headers)
            msg = await future
        finally:
            timer.cancel()
            self._waiting.pop(reply, None)
            if future.done() and not future.cancelled():
                # The timer may have fired while the publish itself failed: that timeout is
                # superseded, not an error for asyncio to report when the future is collected.
                future.exception()
        return msg.data
