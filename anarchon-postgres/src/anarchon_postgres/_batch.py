"""The batch claim's arguments and answers (the function itself: `_many_function`): many
distinct jobs of one slot packed into a few texts and small arrays, and the answer rows read back
into claims in request order.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from anarchon import Claim, ClaimRequest, Outcome, Overlap, StoreCorrupt
from anarchon.backend import keep_until

from ._rows import claim_from_answer

__all__ = ["missing_jobs", "pack_slot_batch", "read_slot_answers"]


def pack_slot_batch(
    batch: Sequence[ClaimRequest],
    *,
    prefix: str,
    slot: int,
    margin_ms: int,
    tail: tuple[int, str, int | None],
) -> tuple[Any, ...]:
    """The batch function's arguments for distinct jobs of one `slot`; `tail` is (history limit,
    lock timeout as the setting shows it, test clock or None)."""
    firsts: list[ClaimRequest] = []  # the first request of each distinct policy
    numbers: dict[tuple[Any, ...], int] = {}
    policy_of = []
    for request in batch:
        key = (
            request.instance,
            request.lease_ms,
            request.max_late_ms,
            request.overlap,
            request.attempts,
        )
        number = numbers.get(key)
        if number is None:
            firsts.append(request)
            number = numbers[key] = len(firsts)
        policy_of.append(number)
    return (
        prefix,
        slot,
        " ".join([r.job for r in batch]),
        " ".join([r.token for r in batch]),
        " ".join(map(str, policy_of)),
        # One per request, or NULL for the usual batch with none.
        [r.skip_reason for r in batch] if any(r.skip_reason for r in batch) else None,
        [r.instance for r in firsts],
        [r.lease_ms for r in firsts],
        [r.max_late_ms for r in firsts],
        [r.overlap is Overlap.SKIP for r in firsts],
        [r.attempts for r in firsts],
        [keep_until(r, margin_ms) for r in firsts],  # the same slot: one value per policy
        *tail,
    )


def missing_jobs(rows: Sequence[tuple[Any, ...]]) -> list[str] | None:
    """The jobs whose rows the batch function found missing, in byte order (the order their rows
    are inserted in), or None when it answered every request."""
    for n, jobs in rows:
        if n == -1:
            return sorted(str(jobs).split(" "))
    return None


def read_slot_answers(
    rows: Sequence[tuple[Any, ...]], batch: Sequence[ClaimRequest], where: str
) -> list[Claim]:
    """The claims, in request order, from the batch function's rows; anything but one answer per
    request is `StoreCorrupt` naming the table (`where`)."""
    claims: list[Claim | None] = [None] * len(batch)
    try:
        for n, text in rows:
            if n == 0:  # "now n n n ...": new runs, attempt 1, as requested
                now_text, *numbers = text.split(" ")
                now = int(now_text)
                for number in numbers:
                    index = int(number) - 1
                    if index < 0 or claims[index] is not None:
                        raise ValueError(number)
                    request = batch[index]
                    claims[index] = Claim(
                        outcome=Outcome.WON,
                        attempt=1,
                        token=request.token,
                        holder=request.instance,
                        lease_until=now + request.lease_ms,
                    )
            else:
                index = n - 1
                if index < 0 or claims[index] is not None:
                    raise ValueError(n)
                claims[index] = claim_from_answer(text, batch[index], where)
    except (ValueError, TypeError, AttributeError, IndexError):
        raise StoreCorrupt(
            f"the batch claim function of {where} answered a row that is not one answer per "
            "request; reopen the store"
        ) from None
    answered = [c for c in claims if c is not None]
    if len(answered) != len(batch):
        raise StoreCorrupt(
            f"the batch claim function of {where} answered {len(answered)} of {len(batch)} "
            "requests; reopen the store"
        )
    return answered
