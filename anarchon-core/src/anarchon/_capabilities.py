"""What a backend can do; the runtime and the conformance kit follow these flags."""

from __future__ import annotations

import attrs

__all__ = ["Capabilities"]


@attrs.frozen(kw_only=True)
class Capabilities:
    """The documented abilities of a store, computed from its options."""

    leases: bool
    """Runs hold renewable leases; a crashed winner is taken over (L1-L11)."""
    self_recognition: bool
    """A resent claim with the same token is recognised as won (C2). Without it a resend is never
    `won` (C3): it may answer `unknown`, `lost` (RabbitMQ answers `lost` even to the true winner's
    resend after a confirmed win) or `done`, so the sender must not run the job on it."""
    fencing: bool
    """renew / finish / release compare tokens, so a taken-over runner is fenced out (L7-L9)."""
    overlap: bool
    """The store can refuse a slot while another run of the job holds a lease (overlap `skip`)."""
    history: bool
    """`history(job, limit)` returns past runs."""
    store_clock: bool
    """`now_ms()` reads the store's own clock (T1); otherwise lateness (and, on a lease store,
    lease expiry) is judged by the asking instance's corrected clock (T4), so clock skew between
    instances widens the time two of them may both see a lease run out: fencing keeps the late
    runner out."""
    skips: bool = False
    """The store keeps a decided skip as a ``skipped`` record with its reason (rule S1): later
    claims of the slot answer `skipped` and `history` shows it. Without it, a skip still takes
    the slot (nobody can win it) but later claims see only that someone else did (`lost`)."""
    batch: bool = False
    """The store implements `SupportsClaimMany`: many jobs of one slot in one round trip."""
    pause: bool = False
    """The store implements `SupportsPause` and its claim keeps rule P1: a paused job's new
    slots are decided ``skipped: paused`` in the claim's own atomic step."""
    trigger: bool = False
    """The store implements `SupportsTrigger` (rule X1): a run asked for now is written to the
    store, every instance finds it, and exactly one wins its ad-hoc slot."""
    retries: bool = False
    """The store implements `SupportsRetry` (rule L12): a failed run is tried again as attempt
    n + 1 by whichever instance claims it after its wait, and its try log keeps every try."""
    membership: bool = False
    """The store implements `SupportsMembership` (rule M1): instances announce themselves with
    a heartbeat, so each (job, slot) is claimed by a few contenders only (DESIGN section 12)."""
    remembers_ms: int | None = None
    """How long the store knows a run after its slot; None means it never forgets one it could
    still be asked about (lease backends keep a floor below which every slot is late, L11)."""
