"""Why claim queues are classic only (issue #24): a quorum queue with ``x-max-length: 1`` and
``reject-publish`` confirms several concurrent publishes on this broker, a classic queue exactly
one; and a user who asks for another queue type gets a `ConfigError` saying why."""

from __future__ import annotations

import asyncio
import uuid

import aiormq
import pytest
from pamqp import commands as spec

from anarchon import ConfigError, connect

from .conftest import AMQP_URL, require_broker

ROUNDS = 8
PUBLISHERS = 4


@pytest.mark.parametrize("queue_type", ["quorum", "stream", "Quorum"])
async def test_queue_type_other_than_classic_is_refused_with_the_reason(queue_type: str) -> None:
    with pytest.raises(ConfigError, match=r"queue_type must be classic") as info:
        await connect(f"{AMQP_URL}?queue_type={queue_type}")
    if queue_type == "quorum":
        assert "overshoots x-max-length" in str(info.value)
    if queue_type == "stream":
        assert "no reject-publish length limit" in str(info.value)


async def _confirmed_per_queue(queue_type: str) -> list[int]:
    """For `ROUNDS` fresh queues of `queue_type` (max-length 1, reject-publish): how many of
    2 x `PUBLISHERS` concurrent persistent publishes the broker confirmed."""
    connections = [await aiormq.connect(AMQP_URL) for _ in range(PUBLISHERS)]
    try:
        channels = [await c.channel(publisher_confirms=True) for c in connections]
        confirmed = []
        for _ in range(ROUNDS):
            queue = f"anarchon-test-qtype-{uuid.uuid4().hex[:12]}"
            await channels[0].queue_declare(
                queue,
                durable=True,
                arguments={
                    "x-queue-type": queue_type,
                    "x-max-length": 1,
                    "x-overflow": "reject-publish",
                },
            )

            async def publish(channel: aiormq.abc.AbstractChannel, name: str = queue) -> int:
                try:
                    await channel.basic_publish(
                        b"claim",
                        routing_key=name,
                        properties=spec.Basic.Properties(delivery_mode=2),
                    )
                except (aiormq.exceptions.DeliveryError, aiormq.exceptions.PublishError):
                    return 0
                return 1

            answers = await asyncio.gather(*(publish(ch) for ch in channels for _ in range(2)))
            confirmed.append(sum(answers))
            await channels[0].queue_delete(queue)
        return confirmed
    finally:
        for connection in connections:
            await connection.close()


async def test_quorum_queue_confirms_more_than_one_claim_classic_exactly_one() -> None:
    """The measurement behind the refusal (RabbitMQ 3.10.8 here: a quorum queue confirmed 7 to
    8 of 8 racing publishes in every round)."""
    require_broker()
    classic = await _confirmed_per_queue("classic")
    assert classic == [1] * ROUNDS
    quorum = await _confirmed_per_queue("quorum")
    assert max(quorum) > 1, f"quorum queues kept the limit this time: {quorum}"
