"""Many publishes in flight at once, for `claim_many`: one reply subject per publish under one
inbox subscription, then all the acknowledgements awaited together.

nats-py's own ``publish_async`` is not used: in nats-py 2.16 an error acknowledgement (an
expected-seq refusal) raises inside its reply handler and the publish's future never completes.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Sequence

from nats.aio.client import Client
from nats.aio.msg import Msg
from nats.js.errors import APIError, NoStreamResponseError

from anarchon import StoreUnavailable

from ._answers import Acks, NotAnAnswer, OtherStream

__all__ = ["publish_all"]


async def publish_all(
    nc: Client,
    messages: Sequence[tuple[str, bytes, dict[str, str]]],
    acks: Acks,
    *,
    timeout: float,
    where: str,
) -> list[tuple[int, bool] | Exception]:
    """Publish each ``(subject, body, headers)``; in order, each one's acknowledgement read by
    `acks` (``(seq, duplicate)``) or the error its answer stands for (`APIError` for a refusal,
    `NoStreamResponseError`, `NotAnAnswer`, `OtherStream`). `StoreUnavailable` if any answer is
    missing after `timeout`."""
    if not messages:
        return []
    inbox = nc.new_inbox()
    answers: list[tuple[int, bool] | Exception | None] = [None] * len(messages)
    left = len(messages)
    complete: asyncio.Future[None] = asyncio.get_running_loop().create_future()

    async def on_reply(msg: Msg) -> None:
        nonlocal left
        i = int(msg.subject.rsplit(".", 1)[1])
        if answers[i] is not None:
            return
        try:
            answers[i] = acks.read(msg.data)
        except (APIError, NoStreamResponseError, NotAnAnswer, OtherStream) as exc:
            answers[i] = exc
        left -= 1
        if left == 0 and not complete.done():
            complete.set_result(None)

    sub = await nc.subscribe(f"{inbox}.*", cb=on_reply)
    try:
        for i, (subject, body, headers) in enumerate(messages):
            await nc.publish(subject, body, reply=f"{inbox}.{i}", headers=headers)
        try:
            await asyncio.wait_for(complete, timeout)
        except asyncio.TimeoutError:
            raise StoreUnavailable(
                f"NATS at {where}: {left} of {len(messages)} claims were not acknowledged in "
                "time; they may be resent with the same tokens"
            ) from None
    finally:
        with contextlib.suppress(Exception):
            await sub.unsubscribe()
    return [a for a in answers if a is not None]
