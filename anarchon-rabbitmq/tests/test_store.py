"""`amqp://` against the real broker: won and lost, C3 after lost answers, T3/T4, a foreign
quorum queue, bad credentials, and connections dropped mid-stream (through the kit's proxy)."""

from __future__ import annotations

import asyncio
import logging
import time
from urllib.parse import urlsplit

import aiormq
import pytest

from anarchon import (
    Claim,
    ClaimRequest,
    ConfigError,
    Outcome,
    Scheduler,
    StoreCorrupt,
    StoreUnavailable,
    connect,
)
from anarchon_conformance.proxy import FaultProxy
from anarchon_rabbitmq import RabbitMQStore, queue_arguments, queue_name

from .conftest import (
    AMQP_URL,
    address,
    delete_queues,
    message_count,
    stored_token,
    url_via,
)

WRONG_PASSWORD = "not-the-password-7f3a9c"


def now_slot() -> int:
    now = time.time_ns() // 1_000_000
    return now - now % 1000


def request(job: str, slot: int, **kw: object) -> ClaimRequest:
    return ClaimRequest(job=job, slot=slot, instance="test:1:0000", **kw)  # type: ignore[arg-type]


async def test_won_then_lost(prefix: str, cleanup: set[str]) -> None:
    slot = now_slot()
    cleanup.add(queue_name(prefix, "job", slot))
    async with connect(AMQP_URL, prefix=prefix) as a, connect(AMQP_URL, prefix=prefix) as b:
        first = await a.claim(request("job", slot))
        assert first.won and first.attempt == 1
        second = await b.claim(request("job", slot))
        assert second.outcome is Outcome.LOST
        assert await message_count(queue_name(prefix, "job", slot)) == 1


async def test_C3_resend_is_lost_never_won(prefix: str, cleanup: set[str]) -> None:
    slot = now_slot()
    cleanup.add(queue_name(prefix, "job", slot))
    async with connect(AMQP_URL, prefix=prefix) as store:
        sent = request("job", slot)
        assert (await store.claim(sent)).won
        for _ in range(3):
            again = await store.claim(sent)
            assert again.outcome in (Outcome.LOST, Outcome.UNKNOWN), again


async def test_the_queue_is_a_durable_classic_gate(prefix: str, cleanup: set[str]) -> None:
    slot = now_slot()
    name = queue_name(prefix, "job", slot)
    cleanup.add(name)
    async with connect(AMQP_URL, prefix=prefix, slot_ttl_ms="90s") as store:
        assert (await store.claim(request("job", slot))).won
    connection = await aiormq.connect(AMQP_URL)
    try:
        channel = await connection.channel()
        # An equal declaration is accepted only if every argument matches (durable included).
        await channel.queue_declare(name, durable=True, arguments=queue_arguments(90_000))
    finally:
        await connection.close()
    assert queue_arguments(90_000) == {
        "x-queue-type": "classic",
        "x-max-length": 1,
        "x-overflow": "reject-publish",
        "x-expires": 90_000,
    }


async def test_T4_late_by_the_local_clock(prefix: str) -> None:
    async with connect(AMQP_URL, prefix=prefix, slot_ttl_ms="1h") as store:
        assert await store.now_ms() is None
        old = now_slot() - 120_000
        late = await store.claim(request("job", old, max_late_ms=60_000))
        assert late.outcome is Outcome.LATE and "max_late" in late.reason
        forgotten = await store.claim(request("job", now_slot() - 3_700_000, max_late_ms=10**9))
        assert forgotten.outcome is Outcome.LATE and "slot_ttl" in forgotten.reason
    assert await message_count(queue_name(prefix, "job", old)) is None


async def test_T3_the_queue_expires_after_slot_ttl(prefix: str, cleanup: set[str]) -> None:
    slot = time.time_ns() // 1_000_000
    name = queue_name(prefix, "job", slot)
    cleanup.add(name)
    async with connect(AMQP_URL, prefix=prefix, slot_ttl_ms=1000, prepare_ahead_ms=0) as store:
        assert store.capabilities.remembers_ms == 1000
        assert (await store.claim(request("job", slot))).won
        await asyncio.sleep(0.5)
        assert (await store.claim(request("job", slot))).outcome is Outcome.LOST
        assert await message_count(name) == 1
        # Every declaration, passive ones included, restarts the expiry timer: look only once.
        await asyncio.sleep(1.6)
        assert await message_count(name) is None, "the queue outlived x-expires"
        late = await store.claim(request("job", slot, max_late_ms=10**9))
        assert late.outcome is Outcome.LATE, "a slot older than slot_ttl must be late, not won"


def test_T3_scheduler_refuses_max_late_beyond_slot_ttl(prefix: str) -> None:
    store = RabbitMQStore.create(AMQP_URL, prefix=prefix, slot_ttl_ms="40s", prepare_ahead_ms="10s")
    assert store.capabilities.remembers_ms == 30_000
    scheduler = Scheduler(store, instance="test:1:0000", clock_skew="1s")

    @scheduler.job("* * * * *", max_late="30s", overlap="allow")
    def minutely() -> None: ...

    with pytest.raises(ConfigError) as info:
        asyncio.run(scheduler.start())
    assert "remembers a run (30000 ms)" in str(info.value)
    assert "at most 29000 ms" in str(info.value)


async def test_a_preexisting_quorum_queue_is_refused(prefix: str, cleanup: set[str]) -> None:
    slot = now_slot()
    name = queue_name(prefix, "job", slot)
    cleanup.add(name)
    connection = await aiormq.connect(AMQP_URL)
    try:
        channel = await connection.channel()
        await channel.queue_declare(
            name, durable=True, arguments={"x-queue-type": "quorum", "x-max-length": 1}
        )
    finally:
        await connection.close()
    async with connect(AMQP_URL, prefix=prefix) as store:
        for _ in range(2):  # the channel is reopened after the broker closed it
            with pytest.raises(StoreCorrupt) as info:
                await store.claim(request("job", slot))
            assert name in str(info.value) and "quorum" in str(info.value)
        other = slot - 1000  # not now_slot() - 1000: that is `slot` again a second later
        cleanup.add(queue_name(prefix, "job", other))
        assert (await store.claim(request("job", other))).won, "other runs keep working"
    assert await message_count(name) == 0, "nothing was published to the foreign queue"


async def test_another_slot_ttl_is_refused(prefix: str, cleanup: set[str]) -> None:
    slot = now_slot()
    cleanup.add(queue_name(prefix, "job", slot))
    async with connect(AMQP_URL, prefix=prefix, slot_ttl_ms="1m") as one:
        assert (await one.claim(request("job", slot))).won
    async with connect(AMQP_URL, prefix=prefix, slot_ttl_ms="2m") as two:
        with pytest.raises(StoreCorrupt, match="same slot_ttl"):
            await two.claim(request("job", slot))


async def test_wrong_password_is_a_clear_error_without_it(
    caplog: pytest.LogCaptureFixture,
) -> None:
    host, port = address()
    caplog.set_level(logging.DEBUG)
    with pytest.raises(ConfigError) as info:
        await connect(url_via(host, port, password=WRONG_PASSWORD))
    assert "refused the login" in str(info.value)
    assert WRONG_PASSWORD not in str(info.value) and WRONG_PASSWORD not in repr(info.value)
    assert WRONG_PASSWORD not in caplog.text


async def test_unknown_virtual_host_is_a_clear_error(caplog: pytest.LogCaptureFixture) -> None:
    host, port = address()
    caplog.set_level(logging.DEBUG)
    url = url_via(host, port).rsplit("/", 1)[0] + "/anarchon-no-such-vhost"
    with pytest.raises(ConfigError) as info:
        await connect(url)
    message = str(info.value)
    assert "refused the virtual host 'anarchon-no-such-vhost' at login" in message, message
    assert "rabbitmqctl add_vhost" in message
    parts = urlsplit(url)
    assert f"{parts.username}:***@" in message  # the password is hidden
    assert f":{parts.password}@" not in message and f":{parts.password}@" not in caplog.text


async def test_unreachable_broker_is_store_unavailable(caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.DEBUG)
    with pytest.raises(StoreUnavailable) as info:
        await connect(f"amqp://guest:{WRONG_PASSWORD}@127.0.0.1:1/", connect_timeout_ms="1s")
    assert WRONG_PASSWORD not in str(info.value)
    assert WRONG_PASSWORD not in caplog.text


async def test_C3_lost_confirm_is_unknown_never_won(prefix: str, cleanup: set[str]) -> None:
    slot = now_slot()
    async with (
        FaultProxy(*address()) as proxy,
        connect(url_via(*proxy.address), prefix=prefix) as store,
        connect(AMQP_URL, prefix=prefix) as direct,
    ):
        unknown = 0
        for n in range(6):
            job = f"c3x{n}"
            cleanup.add(queue_name(prefix, job, slot))
            sent = request(job, slot)
            # The declare and the publish are separate writes: lose the reply to either.
            proxy.drop_reply_after(1 + n % 2)
            try:
                first = await store.claim(sent)
            except StoreUnavailable:
                first = None
            proxy.heal()
            stored = await message_count(queue_name(prefix, job, slot))
            if first is not None:
                unknown += 1
                assert first.outcome is Outcome.UNKNOWN, first
                assert stored == 1, "unknown only when a claim may be stored"
            resent = await store.claim(sent)
            rival = await direct.claim(request(job, slot))
            wins = [c for c in (first, resent, rival) if c is not None and c.won]
            assert len(wins) <= 1
            if stored == 1 and first is None:
                assert resent.outcome is Outcome.UNKNOWN, resent
            assert not rival.won or stored == 0
        assert unknown >= 1, "no lost confirm was exercised"


async def test_connections_dropped_mid_stream(prefix: str, cleanup: set[str]) -> None:
    """A broker restart as the client sees it: every connection drops while claims are in
    flight. No slot gets two winners or a false one, and the store recovers on its own: a claim
    cut off from its answer is resent (`StoreUnavailable`) or `unknown`, and every slot ends up
    holding exactly one claim. A dropped connection is noticed at once, never waited out: the
    confirm timeout is longer than the test may take, so no answer may come from it."""
    base = now_slot()
    slots = [base - i * 1000 for i in range(40)]
    cleanup.update(queue_name(prefix, "mid", s) for s in slots)
    async with (
        FaultProxy(*address()) as proxy,
        connect(url_via(*proxy.address), prefix=prefix, confirm_timeout_ms="60s") as a,
        connect(url_via(*proxy.address), prefix=prefix, confirm_timeout_ms="60s") as b,
    ):

        async def claim_until_answered(store: object, slot: int) -> tuple[str, Claim]:
            """Resend (same token) while the store says it cannot tell: until an answer."""
            assert isinstance(store, RabbitMQStore)
            sent = request("mid", slot)
            deadline = asyncio.get_running_loop().time() + 30
            while True:
                try:
                    return sent.token, await store.claim(sent)
                except StoreUnavailable as exc:
                    if asyncio.get_running_loop().time() > deadline:
                        raise AssertionError(f"never answered: {exc}") from None
                    await asyncio.sleep(0.05)

        async def chaos() -> None:
            for _ in range(3):
                await asyncio.sleep(0.05)
                proxy.drop_all()

        results = await asyncio.gather(
            chaos(),
            *(claim_until_answered(s, slot) for slot in slots for s in (a, b, a, b)),
        )
    answers: list[tuple[str, Claim]] = results[1:]
    for i, slot in enumerate(slots):
        mine = answers[i * 4 : i * 4 + 4]
        outcomes = [claim.outcome for _, claim in mine]
        shown = (slot, [(claim.outcome.value, claim.reason) for _, claim in mine])
        winners = [token for token, claim in mine if claim.won]
        assert len(winners) <= 1, shown
        # `unknown` only for a claim cut off from its answer whose queue was then found full:
        # never by waiting out the confirm timeout on a connection known to be closed.
        assert not any("did not confirm" in claim.reason for _, claim in mine), shown
        # So every answer proves a stored claim: `won` and `lost` by the broker's confirm,
        # `unknown` by the full queue.
        name = queue_name(prefix, "mid", slot)
        assert await message_count(name) == 1, shown
        holder = await stored_token(name)
        assert holder in {token for token, _ in mine}, shown
        if winners:
            assert winners == [holder], ("a false win", shown)
        if Outcome.UNKNOWN not in outcomes:
            assert len(winners) == 1, shown


async def test_history_is_not_available(prefix: str) -> None:
    async with connect(AMQP_URL, prefix=prefix) as store:
        assert store.capabilities.history is False
        assert await store.history("job") == []


async def test_cleanup_helper_deletes(prefix: str) -> None:
    slot = now_slot()
    async with connect(AMQP_URL, prefix=prefix) as store:
        assert (await store.claim(request("job", slot))).won
    await delete_queues([queue_name(prefix, "job", slot)])
    assert await message_count(queue_name(prefix, "job", slot)) is None
