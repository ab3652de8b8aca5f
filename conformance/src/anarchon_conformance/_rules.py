"""The rules the kit certifies, with the words the certificate shows for them."""

from __future__ import annotations

from collections.abc import Callable
from typing import TypeVar

import attrs

__all__ = ["RULES", "Rule", "rule"]

F = TypeVar("F", bound=Callable[..., object])


@attrs.frozen(kw_only=True)
class Rule:
    id: str
    description: str
    required: bool = False
    """Can never be not applicable: the certificate fails unless the rule passed."""


RULES: tuple[Rule, ...] = (
    Rule(
        id="C1",
        description="single winner: at most one `won` per (job, slot, attempt)",
        required=True,
    ),
    Rule(id="C2", description="idempotent per token: a resent claim is `won` again"),
    Rule(id="C3", description="fail closed: an ambiguous answer is never `won`"),
    Rule(
        id="C4",
        description="liveness: a claim of a slot that is not late and has no run is `won`",
        required=True,
    ),
    Rule(
        id="C5",
        description="early claims: claims sent before their slot never win twice (refused or "
        "remembered)",
        required=True,
    ),
    Rule(
        id="S1",
        description="the ledger: a decided skip is recorded with its reason, later claims answer "
        "`skipped`, never `won`",
    ),
    Rule(
        id="L1",
        description="claim with no run: forgotten `late`, `skipped` (late, skip_reason, overlap), "
        "or won attempt 1",
    ),
    Rule(id="L2", description="running, same token: won, nothing changes"),
    Rule(id="L3", description="running, other token, live lease: running"),
    Rule(id="L4", description="lease ran out, attempts left: takeover, attempt + 1"),
    Rule(id="L5", description="lease ran out, no attempts left: interrupted, done"),
    Rule(id="L6", description="finished run: done for every token"),
    Rule(id="L7", description="renew only with the holding token"),
    Rule(
        id="L8",
        description="finish only with the holding token; resent with the same token and status: "
        "True, nothing changes (C2 for finish)",
    ),
    Rule(id="L9", description="release only with the holding token; a backup takes over at once"),
    Rule(id="L10", description="check: a plain read, the claim step only for an expired lease"),
    Rule(id="L11", description="retention: runs kept long enough, history kept separately"),
    Rule(
        id="L12",
        description="retry: only the holder; the run waits by the store's clock, then attempt + 1; "
        "the try log grows, is bounded and kept by finish, L5 and sweeps (SupportsRetry)",
    ),
    Rule(id="F1", description="self-fencing by the runner"),
    Rule(id="F2", description="fencing token grows strictly with (slot, attempt)"),
    Rule(
        id="T1",
        description="clocks: lateness and lease expiry judged by the store's clock, never by a "
        "claiming client's (a store without one says so, and instances judge by their own)",
    ),
    Rule(id="T3", description="the store remembers a run as long as its capabilities say"),
    Rule(id="ISO", description="isolation between jobs and between prefixes"),
    Rule(id="REC", description="reconnect after the server drops every connection; outages"),
    Rule(id="MODEL", description="stateful agreement with the memory:// reference model"),
    Rule(id="PREP", description="preparing a slot ahead decides nothing (SupportsPrepare)"),
    Rule(id="SETUP", description="setting jobs up at start decides nothing (SupportsJobSetup)"),
    Rule(
        id="R1",
        description="read-only: opened read-only, a store creates and changes nothing; an unused "
        "one is StoreNotSetUp (SupportsReadOnly)",
    ),
    Rule(
        id="P1",
        description="pause: a paused job's new slots are recorded `skipped: paused` by the claim "
        "itself, runs made before go on, resume or until ends it (SupportsPause)",
    ),
    Rule(
        id="X1",
        description="trigger: an ad-hoc slot off the whole second, unique per job, listed to every "
        "instance, won once like any slot (SupportsTrigger)",
    ),
    # -- the fleet (DESIGN section 12) --
    Rule(
        id="M1",
        description="membership: announce keeps a member live for its ttl by the store's clock "
        "(started kept, stats replaced), members lists the live ones sorted, also read-only; "
        "leave removes one (SupportsMembership)",
    ),
)

RULE_IDS = frozenset(r.id for r in RULES)
ONE_OF_REQUIRED = ("C2", "C3")
"""At least one of these must pass: a store either recognises its own claim or fails closed."""

MARKER = "anarchon_rule"


def rule(*ids: str) -> Callable[[F], F]:
    """Mark a test as checking the rules `ids`; the certificate counts it for each."""
    unknown = set(ids) - RULE_IDS
    if unknown:
        raise ValueError(f"unknown rule ids {sorted(unknown)}")
    import pytest

    def mark(func: F) -> F:
        return getattr(pytest.mark, MARKER)(*ids)(func)  # type: ignore[no-any-return]

    return mark
