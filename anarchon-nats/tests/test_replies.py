"""A claim's own publish path (`Replies`): acknowledgements read strictly, answers that are not
acknowledgements refused clearly, a publish nobody answers given up after ``timeout_ms`` and its
late answer ignored, and nothing left waiting.

The odd answers come from a plain NATS subscriber standing in for the stream (deleted first, so
that it is the only one answering on the claims' subjects).
"""

from __future__ import annotations

import time
from collections.abc import AsyncIterator, Awaitable, Callable

import nats
import pytest
from nats.aio.msg import Msg
from nats.js.errors import APIError, NoStreamResponseError, NotFoundError

from anarchon import ClaimRequest, StoreCorrupt, StoreUnavailable
from anarchon_nats import NATSStore
from anarchon_nats._answers import Acks, NotAnAnswer, OtherStream, read_ack, read_stored

from .conftest import NATS_URL, StoreFactory, delete_stream


def request(job: str = "sync") -> ClaimRequest:
    return ClaimRequest(job=job, slot=time.time_ns() // 1_000_000 - 10, instance="test:1:aaaa")


def test_read_ack_fields() -> None:
    assert read_ack(b'{"stream":"S","seq":7}') == {"stream": "S", "seq": 7}
    duplicate = read_ack(b'{"stream":"S","seq":7,"duplicate":true}')
    assert duplicate["duplicate"] is True and duplicate["seq"] == 7


def test_read_ack_raises_the_refusal_as_nats_py_does() -> None:
    with pytest.raises(NotFoundError):
        read_ack(b'{"error":{"code":404,"err_code":10059,"description":"stream not found"}}')
    with pytest.raises(APIError) as refused:
        read_ack(b'{"error":{"code":400,"err_code":10071,"description":"wrong last sequence"}}')
    assert refused.value.err_code == 10071
    with pytest.raises(NoStreamResponseError):
        read_ack(b"")


@pytest.mark.parametrize(
    "data",
    [
        b'{"stream":"ANARCHON_p","seq":41}',
        b'{"stream":"ANARCHON_p","seq":41,"duplicate":true}',
        b'{"stream":"ANARCHON_p","seq":41,"duplicate":false}',
        b'{"stream":"ANARCHON_p","domain":"hub","seq":41}',
        b'{"seq":41,"stream":"ANARCHON_p","duplicate":true}',
        b'{ "stream": "ANARCHON_p", "seq": 41 }',
    ],
)
def test_acks_read_every_form_as_the_json_parse_does(data: bytes) -> None:
    ack = read_ack(data)
    assert Acks("ANARCHON_p").read(data) == (ack["seq"], ack.get("duplicate") is True)


def test_acks_name_another_stream() -> None:
    with pytest.raises(OtherStream) as other:
        Acks("ANARCHON_p").read(b'{"stream":"ANARCHON_q","seq":41}')
    assert other.value.stream == "ANARCHON_q"
    with pytest.raises(NotFoundError):
        Acks("ANARCHON_p").read(b'{"error":{"code":404,"description":"stream not found"}}')


def test_read_stored_gives_sequence_and_body() -> None:
    answer = b'{"type":"t","message":{"subject":"p.j.claims","seq":5,"data":"eyJ4IjoxfQ==",'
    answer += b'"time":"2026-12-05T00:40:32.607915368Z"}}'
    assert read_stored(answer) == (5, b'{"x":1}')
    assert read_stored(b'{"message":{"seq":6}}') == (6, b"")


def test_read_stored_gone_is_not_found() -> None:
    with pytest.raises(NotFoundError):
        read_stored(b'{"error":{"code":404,"err_code":10037,"description":"no message found"}}')


ACK, STORED = "not an acknowledgement", "not a stored message"
NOT_ANSWERS = [
    *[
        (read_ack, data, ACK)
        for data in (
            b"<html>",
            b"\xff\xfe",
            b"[1, 2]",
            b'{"stream":"S"}',
            b'{"stream":"S","seq":"7"}',
            b'{"stream":"S","seq":true}',
            b'{"stream":7,"seq":7}',
            b'{"error":"no"}',
            b'{"error":{"description":"no code"}}',
        )
    ],
    *[
        (Acks("ANARCHON_p").read, data, ACK)
        for data in (
            b'{"stream":"ANARCHON_p","seq":}',
            b'{"stream":"ANARCHON_p","seq":4x1}',
            b'{"stream":"ANARCHON_p","seq":41,"duplicate":true',
            b'{"stream":"ANARCHON_p","seq":"41"}',
        )
    ],
    *[
        (read_stored, data, STORED)
        for data in (
            b"<html>",
            b'{"stream":"S","seq":7}',
            b'{"message":"no"}',
            b'{"message":{"seq":"5","data":""}}',
            b'{"message":{"seq":5,"data":"not base64!"}}',
            b'{"message":{"seq":5,"data":7}}',
        )
    ],
]


@pytest.mark.parametrize(("read", "data", "words"), NOT_ANSWERS)
def test_what_is_not_the_answer_asked_for_is_refused(
    read: Callable[[bytes], object], data: bytes, words: str
) -> None:
    """Not JSON, not an object, a field missing or of another type, a near miss of the fast
    path: refused, never read as a won claim."""
    with pytest.raises(NotAnAnswer, match=words):
        read(data)


Answer = Callable[[Msg], bytes | None]


@pytest.fixture
async def impostor(prefix: str) -> AsyncIterator[Callable[[Answer], Awaitable[None]]]:
    """Delete the store's stream, then answer its claims' subjects with `answer(msg)` (None: do
    not answer). Returns a way to install it; the connection is closed after the test."""
    nc = await nats.connect(NATS_URL)
    subs = []

    async def install(answer: Answer) -> None:
        await delete_stream(f"ANARCHON_{prefix}")

        async def respond(msg: Msg) -> None:
            data = answer(msg)
            if data is not None:
                await msg.respond(data)

        subs.append(await nc.subscribe(f"{prefix}.*.claims", cb=respond))
        await nc.flush()

    yield install
    await nc.close()


async def test_deleted_stream_is_unavailable_and_nothing_waits(stores: StoreFactory) -> None:
    store = await stores()
    await delete_stream(store.stream)
    with pytest.raises(StoreUnavailable, match="no JetStream answer"):
        await store.claim(request())
    with pytest.raises(StoreUnavailable, match="no JetStream answer"):
        await store.claim_many([request("a"), request("b")])
    assert store._link is not None and store._link.replies.waiting == 0


@pytest.mark.parametrize(
    ("answer", "error", "words"),
    [
        (b"<html>not NATS</html>", StoreUnavailable, "not an acknowledgement"),
        (b'{"stream":"ANARCHON_x","seq":"one"}', StoreUnavailable, "not an acknowledgement"),
        (b'{"error":{"code":503,"description":"no quorum"}}', StoreUnavailable, "unavailable"),
        (b'{"stream":"OTHER","seq":3}', StoreCorrupt, "stream 'OTHER'"),
    ],
)
async def test_an_answer_that_is_not_our_acknowledgement_is_refused(
    stores: StoreFactory,
    impostor: Callable[[Answer], Awaitable[None]],
    answer: bytes,
    error: type[Exception],
    words: str,
) -> None:
    store = await stores(timeout_ms="5s")
    await impostor(lambda msg: answer)
    started = time.monotonic()
    with pytest.raises(error, match=words):
        await store.claim(request())
    with pytest.raises(error, match=words):
        await store.claim_many([request("a"), request("b")])
    assert time.monotonic() - started < 4, "refused at once, not after the timeout"
    assert store._link is not None and store._link.replies.waiting == 0


async def test_unanswered_publish_gives_up_and_its_late_answer_is_dropped(
    stores: StoreFactory, impostor: Callable[[Answer], Awaitable[None]]
) -> None:
    store = await stores(timeout_ms="300ms")
    held: list[Msg] = []

    def hold_the_first(msg: Msg) -> bytes | None:
        if not held:
            held.append(msg)
            return None
        return f'{{"stream":"{store.stream}","seq":{len(held) + 1}}}'.encode()

    await impostor(hold_the_first)
    started = time.monotonic()
    with pytest.raises(StoreUnavailable, match="timeout"):
        await store.claim(request())
    assert 0.25 <= time.monotonic() - started < 3
    assert store._link is not None and store._link.replies.waiting == 0
    # The late answer comes now, to a publish that gave up: dropped, and it answers nobody else.
    assert held[0].reply
    await held[0].respond(f'{{"stream":"{store.stream}","seq":1,"duplicate":true}}'.encode())
    claim = await store.claim(request())
    assert claim.won, claim
    assert store._link.replies.waiting == 0


async def test_the_reply_path_ends_with_the_store(prefix: str) -> None:
    store = NATSStore.create(NATS_URL, prefix=prefix)
    await store.open()
    replies, client = store._opened().replies, store._opened().nc
    assert (await store.claim(request())).won
    await store.close()
    assert store._link is None and client.is_closed
    assert replies.waiting == 0
    with pytest.raises(StoreUnavailable, match="not open"):
        await store.claim(request())
