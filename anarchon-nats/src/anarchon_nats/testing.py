"""Backdoors for tests and the conformance kit: read what the stream holds with plain JetStream
requests on the caller's own nats-py connection, bypassing `NATSStore` (an independent oracle:
subjects and message bodies are read here as the README documents them, not by the store's
code).

`js` is a ``nats.js.JetStreamContext`` of the caller's own client; `prefix` is the store's prefix
option, `strategy` its strategy option, `stream` its stream (default ``ANARCHON_<prefix>``).

* `raw_run(js, prefix, job, slot, strategy=...)`: the claim of the slot as a `RunRecord`
  (``claimed``, attempt 1, or ``skipped``, attempt 0, with the reason as its error), or None.
* `delete_stream(js, name)`: delete a stream; False when there was none.

There is no `force_expire`: NATS claims hold no lease. The stream forgets a run by itself (the
duplicate window or ``max_age``).
"""

from __future__ import annotations

import json
from typing import Any

from nats.js import JetStreamContext
from nats.js.errors import NotFoundError

from anarchon import RunRecord, RunStatus

__all__ = ["delete_stream", "raw_run"]


async def raw_run(
    js: JetStreamContext,
    prefix: str,
    job: str,
    slot: int,
    *,
    strategy: str = "msg-id",
    stream: str | None = None,
) -> RunRecord | None:
    """The stored claim message of (job, slot): msg-id reads every message on the job's subject
    ``<prefix>.<job>.claims``, expected-seq the slot's own ``<prefix>.<job>.slot.<slot>``."""
    name = stream or f"ANARCHON_{prefix}"
    bodies: list[Any] = []
    if strategy == "expected-seq":
        try:
            msg = await js.get_last_msg(name, f"{prefix}.{job}.slot.{slot}")
        except NotFoundError:
            return None
        bodies.append(json.loads(msg.data or b"{}"))
    elif strategy == "msg-id":
        seq = 0
        while True:
            try:
                msg = await js.get_msg(
                    name, seq=seq + 1, subject=f"{prefix}.{job}.claims", next=True
                )
            except NotFoundError:
                break
            if msg.seq is None:
                raise ValueError(f"stream {name} answered a message without a sequence")
            seq = msg.seq
            bodies.append(json.loads(msg.data or b"{}"))
    else:
        raise ValueError(f"unknown strategy {strategy!r}")
    for body in bodies:
        if not isinstance(body, dict) or body.get("slot") != slot:
            continue
        if "skip" in body:
            return RunRecord(
                job=job,
                slot=slot,
                status=RunStatus.SKIPPED,
                attempt=0,
                token=body["token"],
                holder=body["instance"],
                error=body["skip"],
            )
        return RunRecord(
            job=job,
            slot=slot,
            status=RunStatus.CLAIMED,
            attempt=1,
            token=body["token"],
            holder=body["instance"],
        )
    return None


async def delete_stream(js: JetStreamContext, name: str) -> bool:
    """Delete the stream `name`; False when it does not exist."""
    try:
        await js.delete_stream(name)
    except NotFoundError:
        return False
    return True
