"""What a claim is made of on the broker: the run's queue, its arguments and the claim message."""

from __future__ import annotations

import json
from typing import Any

from pamqp import commands as spec

from anarchon import ClaimRequest, StoreCorrupt

__all__ = [
    "WARM_UP",
    "claim_body",
    "claim_properties",
    "explain_refusal",
    "probe_name",
    "queue_arguments",
    "queue_name",
]

QUEUE_TYPE = "classic"
"""Quorum queues accept a second message at ``x-max-length: 1`` (seen on 3.10): never them."""


def queue_name(prefix: str, job: str, slot: int) -> str:
    """``<prefix>.<job>.slot.<slot>``: at most 227 bytes, within RabbitMQ's 255 (names are
    checked by `check_name`: letters, digits, ``_`` and ``-`` only)."""
    return f"{prefix}.{job}.slot.{slot}"


def probe_name(prefix: str, nonce: str) -> str:
    """``<prefix>.warm-up-probe.<nonce>``: a queue of the store's own, never a run's (a run's name
    has four dot-separated parts, the probe's three)."""
    return f"{prefix}.warm-up-probe.{nonce}"


WARM_UP = spec.Basic.Properties(
    delivery_mode=2, expiration="0", app_id="anarchon", message_type="warm-up"
)
"""A message that only warms a prepared queue up. The first persistent message of a new durable
queue costs the broker about twice a later one (it sets up the queue's files on disk), and the
winning claim is that first message unless something came before it. This one comes before it:
persistent, so the broker does that setup, and with a time to live of 0, so the queue drops it in
the same step that stores it (a message that expires on arrival unless a consumer takes it, and
no consumer ever does). The queue is never seen holding it, so it decides nothing: into an empty
queue it leaves the queue empty; into a claimed one it is refused, like any second message."""


def queue_arguments(slot_ttl_ms: int) -> dict[str, Any]:
    """A gate that holds one message and refuses the rest, and forgets itself `slot_ttl_ms` after
    the last declaration the broker answered (the claims' no-wait declarations do not count: in
    practice, after its creation). ``x-queue-type`` is explicit, so a virtual host whose default
    type is quorum cannot change it, and an existing queue of another type is refused by the
    broker."""
    return {
        "x-queue-type": QUEUE_TYPE,
        "x-max-length": 1,
        "x-overflow": "reject-publish",
        "x-expires": slot_ttl_ms,
    }


def claim_body(request: ClaimRequest, now_ms: int) -> bytes:
    """The claim as JSON, for whoever inspects the queue (it is never consumed). A request with
    a `skip_reason` holds the queue as a skip: ``"skip": <reason>`` (the ledger, S1)."""
    body: dict[str, object] = {
        "job": request.job,
        "slot": request.slot,
        "token": request.token,
        "instance": request.instance,
        "claimed_at": now_ms,
    }
    if request.skip_reason is not None:
        body["skip"] = request.skip_reason
    return json.dumps(body, separators=(",", ":")).encode()


def claim_properties(request: ClaimRequest, now_ms: int) -> spec.Basic.Properties:
    """Persistent, so a claim survives a broker restart with its durable queue."""
    return spec.Basic.Properties(
        content_type="application/json",
        delivery_mode=2,
        message_id=request.token,
        app_id="anarchon",
        message_type="claim" if request.skip_reason is None else "skip",
        timestamp=None,
        headers={"claimed_at": now_ms},
    )


def explain_refusal(queue: str, reply: str, slot_ttl_ms: int) -> StoreCorrupt:
    """The error for a queue the broker would not declare with our arguments (PRECONDITION_FAILED):
    someone else's queue, a quorum queue, or an instance with another `slot_ttl_ms`."""
    wanted = ", ".join(f"{k}={v}" for k, v in queue_arguments(slot_ttl_ms).items())
    return StoreCorrupt(
        f"RabbitMQ queue {queue!r} exists with other settings than anarchon's claim queues "
        f"(durable, {wanted}); the broker said: {reply}. anarchon never uses such a queue: a "
        "quorum queue or one without the max-length-1 gate could let two instances win. Delete "
        "the queue, use another prefix, or give every instance the same slot_ttl"
    )
