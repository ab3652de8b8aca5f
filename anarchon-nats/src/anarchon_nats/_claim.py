"""One claim: its publish on the store's reply subscription (`_replies`), and the read-back of a
duplicate or a refusal (C2).

The publish carries the strategy's headers, so the stream stores only the first claim of a run.
A duplicate acknowledgement names the stored message's sequence; a refusal (expected-seq) names
none, and the run's subject is read instead. The stored claim then answers the request
(`_records.answer_from`): a skip is `skipped` (S1), its own token `won` (a resend), another
token `lost`; a message that is gone is `lost` too, never `won` (C3).
"""

from __future__ import annotations

import asyncio
import json
import time
from typing import TYPE_CHECKING, Any

from nats.js.errors import APIError, NotFoundError

from anarchon import AnarchonError, Claim, ClaimRequest, Outcome, StoreCorrupt, StoreUnavailable

from ._answers import OtherStream, read_stored
from ._connection import DRIVER_ERRORS
from ._records import answer_from, decode, encode, taken

if TYPE_CHECKING:
    from ._connection import Link
    from ._strategies import Strategy

__all__ = [
    "CONFLICT_RETRIES",
    "ERR_DUPLICATE_IN_PROCESS",
    "ERR_SUBJECT_IN_PROCESS",
    "captured",
    "claim_one",
    "in_process",
    "read_back",
    "wall_ms",
]

ERR_DUPLICATE_IN_PROCESS = 10158
"""A clustered stream has not decided a concurrent duplicate yet (HTTP-like code 409)."""
ERR_SUBJECT_IN_PROCESS = 10164
"""``wrong last sequence`` with no number (servers from 2.10 on): a clustered stream holds a
concurrent publish to the subject that it has not applied yet, so it cannot say whether the
subject is taken. Not decided yet, as 10158: resend; the answer then is 10071 or a store."""
CONFLICT_RETRIES = 8


def wall_ms() -> int:
    return time.time_ns() // 1_000_000


def in_process(exc: BaseException) -> bool:
    """A clustered stream's "not decided yet" for a concurrent duplicate (10158) or a
    concurrent publish to the same subject (10164): try again."""
    return isinstance(exc, APIError) and (
        exc.err_code in (ERR_DUPLICATE_IN_PROCESS, ERR_SUBJECT_IN_PROCESS)
        or (exc.code == 409 and exc.err_code is None)
    )


def captured(link: Link, strategy: Strategy, stream: object) -> StoreCorrupt:
    """A claim stored by another stream: ours was deleted and another now takes the claims'
    subjects, so read-backs (C2) would look in the wrong place."""
    return StoreCorrupt(
        f"NATS at {link.where}: stream {stream!r}, not {link.stream}, took a claim on "
        f"{strategy.pattern}; stream {link.stream} was deleted or replaced: remove the "
        "other stream's subjects or use another prefix"
    )


async def claim_one(link: Link, strategy: Strategy, request: ClaimRequest) -> Claim:
    """Publish the claim (C1: the stream stores one per run); a refusal or duplicate is read
    back and its token compared (C2). A request with a `skip_reason` publishes a skip in the
    same way: it takes the slot and answers `skipped`, and so does every later claim of the
    slot (S1). `StoreUnavailable` on transport errors. Time is judged before (`Strategy.judge`)."""
    subject = strategy.subject(request.job, request.slot)
    body = encode(request)
    headers = strategy.headers(request)
    try:
        for attempt in range(CONFLICT_RETRIES):
            try:
                answer = await link.replies.request(subject, body, headers, link.timeout)
                seq, duplicate = link.acks.read(answer)
            except APIError as exc:
                if in_process(exc):
                    await asyncio.sleep(0.005 * 2**attempt)
                    continue
                if strategy.taken(exc):
                    return await read_back(link, strategy, request, None)
                raise
            except OtherStream as exc:
                raise captured(link, strategy, exc.stream) from None
            if duplicate:
                return await read_back(link, strategy, request, seq)
            return taken(request, wall_ms())
    except AnarchonError:
        raise
    except DRIVER_ERRORS as exc:
        raise link.error(exc) from None
    raise StoreUnavailable(
        f"NATS at {link.where}: stream {link.stream} has not decided a concurrent duplicate "
        f"of {request.job}@{request.slot} yet; the claim may be resent with the same token"
    )


async def read_back(
    link: Link, strategy: Strategy, request: ClaimRequest, seq: int | None
) -> Claim:
    """The stored claim for the run: message `seq`, or (None) the last on the run's subject."""
    if seq is not None:
        query: dict[str, Any] = {"seq": seq}
    else:
        query = {"last_by_subj": strategy.subject(request.job, request.slot)}
    try:
        answer = await link.replies.request(
            link.get_api, json.dumps(query).encode(), None, link.timeout
        )
        stored, data = read_stored(answer)
    except NotFoundError:
        return Claim(
            outcome=Outcome.LOST,
            reason=f"the stream knows the run was claimed, but its message is gone from "
            f"stream {link.stream}",
        )
    record = decode(data, stream=link.stream, seq=stored)
    if record.job != request.job or record.slot != request.slot:
        raise StoreCorrupt(
            f"message {stored} of stream {link.stream} holds {record.job}@{record.slot}, "
            f"expected {request.job}@{request.slot}"
        )
    return answer_from(record, request)
