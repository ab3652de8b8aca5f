"""`claim_many`: every claim's publish in flight at once (one reply subject per publish under one
inbox subscription), all the acknowledgements awaited together, then duplicates and refusals
decided as one claim decides them (`_claim`).

nats-py's own ``publish_async`` is not used: in nats-py 2.16 an error acknowledgement (an
expected-seq refusal) raises inside its reply handler and the publish's future never completes.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Coroutine, Sequence
from typing import TYPE_CHECKING, Any

from nats.aio.client import Client
from nats.aio.msg import Msg
from nats.js.errors import APIError, NoStreamResponseError

from anarchon import AnarchonError, Claim, ClaimRequest, StoreUnavailable

from ._answers import Acks, NotAnAnswer, OtherStream
from ._claim import captured, claim_one, in_process, read_back, wall_ms
from ._connection import DRIVER_ERRORS
from ._records import encode, taken

if TYPE_CHECKING:
    from ._connection import Link
    from ._strategies import Strategy

__all__ = ["claim_all", "publish_all"]


async def claim_all(
    link: Link, strategy: Strategy, requests: Sequence[ClaimRequest]
) -> list[Claim]:
    """Every claim published at once, the acknowledgements awaited together; duplicates and
    refusals are then read back as in `claim_one`. Answers are in the order of `requests`.
    A request too far ahead of its slot (C5) raises `ConfigError` before anything is sent."""
    answers: list[Claim | None] = [strategy.judge(r) for r in requests]
    todo = [i for i, answer in enumerate(answers) if answer is None]
    try:
        acks = await publish_all(
            link.nc,
            [
                (
                    strategy.subject(requests[i].job, requests[i].slot),
                    encode(requests[i]),
                    strategy.headers(requests[i]),
                )
                for i in todo
            ],
            link.acks,
            timeout=link.timeout,
            where=link.where,
        )
    except AnarchonError:
        raise
    except DRIVER_ERRORS as exc:
        raise link.error(exc) from None
    again: dict[int, Coroutine[Any, Any, Claim]] = {}
    for i, ack in zip(todo, acks, strict=True):
        if isinstance(ack, tuple):
            seq, duplicate = ack
            if duplicate:
                again[i] = read_back(link, strategy, requests[i], seq)
            else:
                answers[i] = taken(requests[i], wall_ms())
        elif isinstance(ack, APIError) and (strategy.taken(ack) or in_process(ack)):
            again[i] = _claim_again(link, strategy, requests[i])
        else:
            for coroutine in again.values():
                coroutine.close()
            if isinstance(ack, OtherStream):
                raise captured(link, strategy, ack.stream)
            raise link.error(ack)
    if again:
        try:
            decided = await asyncio.gather(*again.values())
        except AnarchonError:
            raise
        except DRIVER_ERRORS as exc:
            raise link.error(exc) from None
        for i, claim in zip(again, decided, strict=True):
            answers[i] = claim
    result = [a for a in answers if a is not None]
    assert len(result) == len(requests)
    return result


async def _claim_again(link: Link, strategy: Strategy, request: ClaimRequest) -> Claim:
    """A refused publish, claimed again alone (time judged again, as any claim)."""
    late = strategy.judge(request)
    if late is not None:
        return late
    return await claim_one(link, strategy, request)


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
