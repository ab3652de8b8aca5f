"""When a claim may be published, judged by this instance's clock (NATS has none, T4).

The stream remembers a claim for `remembers_ms` (msg-id: the duplicate window; expected-seq: the
stream's ``max_age``), and both count from when the message is *written*, not from the slot. So:

* a slot older than ``max_late_ms`` is `late`; one older than `remembers_ms` is `late` as well
  (T3: the stream may have forgotten it, and a publish would win it again); nothing is published;
* a slot ahead of the clock is refused (C5) when its claim, written now, would be forgotten
  before ``slot + max_late_ms``: another instance claiming then would find the slot free.
"""

from __future__ import annotations

from anarchon import Claim, ClaimRequest, Outcome
from anarchon._leases import early_claim_error

__all__ = ["judge_time"]


def judge_time(request: ClaimRequest, now: int, remembers_ms: int, stream: str) -> Claim | None:
    """`late` (nothing to publish), None (publish), or raises `ConfigError` for a claim sent so
    far ahead of its slot that the stream could forget it while the slot can still be claimed."""
    age = now - request.slot
    if age > request.max_late_ms:
        return Claim(
            outcome=Outcome.LATE,
            reason=f"the slot is {age} ms old by this instance's clock, more than max_late "
            f"({request.max_late_ms} ms)",
        )
    if age > remembers_ms:
        return Claim(
            outcome=Outcome.LATE,
            reason=f"the slot is {age} ms old, older than stream {stream} remembers a run "
            f"({remembers_ms} ms, T3)",
        )
    if age < 0:
        # Only ahead of the slot: from the slot on, the T3 check above already refuses every
        # claim made after a claim written now could be forgotten (written at slot + age, it is
        # remembered until slot + age + remembers_ms, past any claim still accepted).
        error = early_claim_error(request, now, remembers_ms)
        if error is not None:
            raise error
    return None
