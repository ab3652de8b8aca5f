"""When a claim may be sent, judged by this instance's clock (RabbitMQ has none, T4).

A run's queue expires ``slot_ttl_ms`` after it was created (by the first claim, or by `prepare`
up to ``prepare_ahead_ms`` before the slot); the claims' no-wait declarations and publishes do
not restart the timer. So RabbitMQ remembers a run for a window counted from when the queue is
*made*, not from the slot:

* a slot older than ``max_late_ms`` is `late`; so is one older than the store promises to
  remember a run, ``slot_ttl_ms - prepare_ahead_ms`` (T3): a prepared queue may be gone by then,
  and a claim would make a new one and win the run again;
* a slot ahead of the clock is refused (C5) when a queue made now would expire before
  ``slot + max_late_ms``: a claim after that would find no queue and win a second time.
"""

from __future__ import annotations

from anarchon import Claim, ClaimRequest, Outcome
from anarchon._leases import early_claim_error

__all__ = ["judge_time"]


def judge_time(
    request: ClaimRequest, now: int, *, slot_ttl_ms: int, remembers_ms: int
) -> Claim | None:
    """`late` (nothing to send), None (send), or raises `ConfigError` for a claim sent so far
    ahead of its slot that its queue could expire while the slot can still be claimed."""
    age = now - request.slot
    if age > request.max_late_ms:
        return Claim(
            outcome=Outcome.LATE,
            reason=f"the slot is {age} ms old by this instance's clock, older than max_late "
            f"({request.max_late_ms} ms)",
        )
    if age > remembers_ms:
        return Claim(
            outcome=Outcome.LATE,
            reason=f"the slot is {age} ms old, older than RabbitMQ remembers a run "
            f"({remembers_ms} ms: slot_ttl {slot_ttl_ms} ms less the preparation lead)",
        )
    if age < 0:
        # Ahead of the slot only: a queue this claim makes lives until now + slot_ttl_ms. From
        # the slot on, the check above bounds every later claim within that. A queue made
        # earlier by `prepare` (at most prepare_ahead_ms ahead) lives to slot + remembers_ms.
        error = early_claim_error(request, now, slot_ttl_ms)
        if error is not None:
            raise error
    return None
