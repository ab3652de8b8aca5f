"""The fleet (DESIGN section 12): membership and the contenders of a slot.

Correctness comes only from the claim (C1-C4). This module shapes load: instances announce
themselves in the store (rule M1, `anarchon.abc.SupportsMembership`), and for each (job, slot)
the **contenders** are the `k` live members with the highest rendezvous hash of
(member, job, slot). Every instance computes the same contenders from the same member list
without talking; the others stay silent for a grace period, then read (`check`) and claim only a
slot still undecided. A wrong or stale member list costs load or a grace period, never a second
winner and never a lost slot."""

from __future__ import annotations

import hashlib
from collections.abc import Iterable, Mapping

import attrs

__all__ = ["Member", "contenders", "rendezvous_score"]


@attrs.frozen(kw_only=True)
class Member:
    """One live instance as the store knows it (M1)."""

    instance: str
    """The instance id (`Scheduler(instance=...)`)."""
    seen_ms: int
    """Its last heartbeat, epoch ms by the store's clock (or the writer's)."""
    until_ms: int
    """When it stops counting as live without another heartbeat (seen_ms + its ttl)."""
    started_ms: int
    """Its first heartbeat since it last joined."""
    stats: Mapping[str, int] = attrs.field(factory=dict)
    """Counters it published with its last heartbeat (``claims``, ``wins``, ``fallbacks``...)."""


def rendezvous_score(instance: str, job: str, slot: int) -> int:
    """The rendezvous (highest random weight) score of `instance` for (job, slot): 64 bits of
    BLAKE2b over the three, so every instance computes the same order."""
    digest = hashlib.blake2b(f"{instance}\x00{job}\x00{slot}".encode(), digest_size=8).digest()
    return int.from_bytes(digest, "big")


def contenders(members: Iterable[str], job: str, slot: int, k: int) -> list[str]:
    """The `k` members (instance ids) that contend for (job, slot), best first: the highest
    `rendezvous_score`, ties broken by id. All of them when there are `k` or fewer."""
    if k < 1:
        raise ValueError(f"k must be >= 1, got {k}")
    ranked = sorted(set(members), key=lambda m: (-rendezvous_score(m, job, slot), m))
    return ranked[:k]
