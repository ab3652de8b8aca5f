"""Claim messages: what a claim publishes, reading one back as a `RunRecord`, and the answer a
claim gets from the message that holds its slot.

The body is JSON: ``{"job": ..., "slot": ..., "token": ..., "instance": ...}``, plus
``"skip": <reason>`` for a request with a `skip_reason` (the ledger, S1): such a message takes the
slot exactly like a claim, and marks it decided not to run. Nothing read from the stream is
executed; a message that does not have this shape is `StoreCorrupt`, naming the stream and the
sequence.
"""

from __future__ import annotations

import datetime
import functools
import json
from typing import Any

from anarchon import Claim, ClaimRequest, Outcome, RunRecord, RunStatus, StoreCorrupt
from anarchon.backend import skip_record, skipped_claim

__all__ = ["answer_from", "decode", "encode", "taken"]


@functools.lru_cache(maxsize=64)
def _json_string(text: str) -> str:
    return json.dumps(text)


def encode(request: ClaimRequest) -> bytes:
    # job and token are plain ASCII by validation; only the instance needs JSON escaping (an
    # instance's name is the same on every claim it makes, so it is escaped once).
    skip = "" if request.skip_reason is None else f',"skip":{json.dumps(request.skip_reason)}'
    return (
        f'{{"job":"{request.job}","slot":{request.slot},"token":"{request.token}",'
        f'"instance":{_json_string(request.instance)}{skip}}}'
    ).encode()


def _epoch_ms(when: datetime.datetime | None) -> int | None:
    return None if when is None else int(when.timestamp() * 1000)


def decode(
    data: bytes | None, *, stream: str, seq: int | None, when: datetime.datetime | None = None
) -> RunRecord:
    """The run a stored claim message holds (``claimed``, or ``skipped`` with its reason as the
    error); `StoreCorrupt` when it is not one of ours."""
    where = f"message {seq} of stream {stream}"
    try:
        body: Any = json.loads(data or b"")
    except (ValueError, UnicodeDecodeError):
        raise StoreCorrupt(f"{where} is not an anarchon claim (not JSON)") from None
    if not isinstance(body, dict):
        raise StoreCorrupt(f"{where} is not an anarchon claim (not a JSON object)")
    job, slot, token, instance = (body.get(k) for k in ("job", "slot", "token", "instance"))
    skip = body.get("skip")
    if not (
        isinstance(job, str)
        and isinstance(slot, int)
        and not isinstance(slot, bool)
        and isinstance(token, str)
        and isinstance(instance, str)
        and (skip is None or (isinstance(skip, str) and skip))
    ):
        raise StoreCorrupt(
            f"{where} is not an anarchon claim: it needs job, slot, token and instance (and "
            "skip, if present, must be a non-empty reason)"
        )
    at = _epoch_ms(when)
    if skip is not None:
        return RunRecord(
            job=job,
            slot=slot,
            status=RunStatus.SKIPPED,
            attempt=0,
            token=token,
            holder=instance,
            claimed_at=at,
            finished_at=at,
            error=skip,
        )
    return RunRecord(
        job=job,
        slot=slot,
        status=RunStatus.CLAIMED,
        attempt=1,
        token=token,
        holder=instance,
        claimed_at=at,
    )


def taken(request: ClaimRequest, now: int) -> Claim:
    """The answer to a request whose own message took the slot: `won`, or `skipped` with its
    reason when it carried one (S1: the writer of a skip is answered skipped)."""
    if request.skip_reason is not None:
        return skipped_claim(skip_record(request, now, request.skip_reason))
    return Claim(outcome=Outcome.WON, attempt=1, token=request.token, holder=request.instance)


def answer_from(stored: RunRecord, request: ClaimRequest) -> Claim:
    """The answer to `request` from the message that holds its slot: a skip answers `skipped`
    (whoever asks, S1); a claim with this request's token is its own resend (`won`, C2), one
    with another token is `lost`."""
    if stored.status is RunStatus.SKIPPED:
        return skipped_claim(stored)
    if stored.token == request.token:
        return Claim(outcome=Outcome.WON, attempt=1, token=request.token, holder=request.instance)
    return Claim(outcome=Outcome.LOST, attempt=1, token=stored.token, holder=stored.holder)
