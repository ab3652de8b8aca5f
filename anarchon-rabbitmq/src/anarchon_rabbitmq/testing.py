"""Backdoors for tests and the conformance kit: look at the runs' queues over a raw aiormq
connection of the caller's own, bypassing `RabbitMQStore` (an independent oracle).

`url` is the broker's address as aiormq takes it (``amqp://user:pass@host:5672/vhost``, without
the store's options); `prefix` is the store's prefix option. Each call opens and closes its own
connection.

* `raw_run(url, prefix, job, slot)`: ``claimed`` (token and holder unknown) when the run's
  queue holds a claim, else None; by a passive declare, so it is safe while claims run.
* `message_count(url, queue)`: messages in a queue (a passive declare), None when it is gone.
* `stored_body(url, queue)` / `stored_token(url, queue)`: the claim a queue holds, as JSON / its
  token, or None: fetched unacknowledged and requeued when the connection closes. Only while no
  claim of the run is sent: an unacknowledged message does not count towards ``x-max-length``.
* `delete_queues(url, names)`: delete queues (AMQP cannot list them: name each one).

There is no `force_expire`: RabbitMQ runs hold no lease. A claim's queue expires by itself
``slot_ttl_ms`` after it was made.
"""

from __future__ import annotations

import json
from collections.abc import Iterable

import aiormq

from anarchon import RunRecord, RunStatus

from ._queues import queue_name

__all__ = ["delete_queues", "message_count", "raw_run", "stored_body", "stored_token"]


async def message_count(url: str, queue: str) -> int | None:
    """Messages in `queue` by a passive declare, or None when it does not exist."""
    connection = await aiormq.connect(url)
    try:
        channel = await connection.channel()
        try:
            ok = await channel.queue_declare(queue, passive=True)
        except aiormq.exceptions.ChannelNotFoundEntity:
            return None
        return int(ok.message_count or 0)
    finally:
        await connection.close()


async def stored_body(url: str, queue: str) -> dict[str, object] | None:
    """The claim `queue` holds, as JSON (None when it holds none or does not exist), read without
    taking it: the message is fetched unacknowledged and requeued when the connection closes.
    Meanwhile the queue would take another message: call it only while no claim is sent."""

    connection = await aiormq.connect(url)
    try:
        channel = await connection.channel()
        try:
            got = await channel.basic_get(queue, no_ack=False)
        except aiormq.exceptions.ChannelNotFoundEntity:
            return None
        if got.delivery_tag is None:
            return None
        body = json.loads(got.body)
        if not isinstance(body, dict):
            raise TypeError(f"queue {queue} holds {got.body[:80]!r}, not a claim")
        return body
    finally:
        await connection.close()


async def stored_token(url: str, queue: str) -> str | None:
    """The token of the claim `queue` holds (None when it holds none), read as `stored_body`."""
    body = await stored_body(url, queue)
    return None if body is None else str(body["token"])


async def raw_run(url: str, prefix: str, job: str, slot: int) -> RunRecord | None:
    """Whether the run's queue holds a claim, by a passive declare: ``claimed`` with an empty
    token and holder, or None. The claim itself is not read: a message fetched unacknowledged
    no longer counts towards the queue's ``x-max-length``, so a claim sent meanwhile would be
    stored as well."""
    if not await message_count(url, queue_name(prefix, job, slot)):
        return None
    return RunRecord(job=job, slot=slot, status=RunStatus.CLAIMED, attempt=1, token="", holder="")


async def delete_queues(url: str, names: Iterable[str]) -> None:
    connection = await aiormq.connect(url)
    try:
        channel = await connection.channel()
        for name in names:
            await channel.queue_delete(name)
    finally:
        await connection.close()
