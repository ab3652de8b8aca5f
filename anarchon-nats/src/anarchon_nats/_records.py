"""Claim messages: what a claim publishes, and reading one back as a `RunRecord`.

The body is JSON: ``{"job": ..., "slot": ..., "token": ..., "instance": ...}``. Nothing read from
the stream is executed; a message that does not have this shape is `StoreCorrupt`, naming the
stream and the sequence.
"""

from __future__ import annotations

import datetime
import functools
import json
from typing import Any

from anarchon import ClaimRequest, RunRecord, RunStatus, StoreCorrupt

__all__ = ["decode", "encode"]


@functools.lru_cache(maxsize=64)
def _json_string(text: str) -> str:
    return json.dumps(text)


def encode(request: ClaimRequest) -> bytes:
    # job and token are plain ASCII by validation; only the instance needs JSON escaping (an
    # instance's name is the same on every claim it makes, so it is escaped once).
    return (
        f'{{"job":"{request.job}","slot":{request.slot},"token":"{request.token}",'
        f'"instance":{_json_string(request.instance)}}}'
    ).encode()


def _epoch_ms(when: datetime.datetime | None) -> int | None:
    return None if when is None else int(when.timestamp() * 1000)


def decode(
    data: bytes | None, *, stream: str, seq: int | None, when: datetime.datetime | None = None
) -> RunRecord:
    """The run a stored claim message holds; `StoreCorrupt` when it is not one of ours."""
    where = f"message {seq} of stream {stream}"
    try:
        body: Any = json.loads(data or b"")
    except (ValueError, UnicodeDecodeError):
        raise StoreCorrupt(f"{where} is not an anarchon claim (not JSON)") from None
    if not isinstance(body, dict):
        raise StoreCorrupt(f"{where} is not an anarchon claim (not a JSON object)")
    job, slot, token, instance = (body.get(k) for k in ("job", "slot", "token", "instance"))
    if not (
        isinstance(job, str)
        and isinstance(slot, int)
        and not isinstance(slot, bool)
        and isinstance(token, str)
        and isinstance(instance, str)
    ):
        raise StoreCorrupt(
            f"{where} is not an anarchon claim: it needs job, slot, token and instance"
        )
    return RunRecord(
        job=job,
        slot=slot,
        status=RunStatus.CLAIMED,
        attempt=1,
        token=token,
        holder=instance,
        claimed_at=_epoch_ms(when),
    )
