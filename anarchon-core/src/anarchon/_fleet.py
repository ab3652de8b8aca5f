"""The fleet (DESIGN section 12): membership and the roles of a slot.

Correctness comes only from the claim (C1-C4). This module shapes load: instances announce
themselves in the store (rule M1, `anarchon.abc.SupportsMembership`), and for each (job, slot)
the live members that run the same jobs are ranked by a rendezvous hash of (member, job, slot).
The first `k` are its **contenders** (they claim at the slot), the next `w` its **watchers**
(they claim a grace later; the claim reads first, so a decided slot costs a read), the rest stay
silent and claim only if every contender and watcher has left the member list since the slot.
Every instance computes the same roles from the same list without talking. A wrong or stale list
costs load or time, never a second winner; a slot is left to others only while someone ranked
above is listed live."""

from __future__ import annotations

import hashlib
from collections.abc import Collection, Iterable, Mapping

import attrs

__all__ = [
    "JOB_SET_STAT",
    "Member",
    "all_departed",
    "contenders",
    "job_set_fingerprint",
    "rank_above",
    "rendezvous_score",
]

JOB_SET_STAT = "job_set"
"""The heartbeat stat that carries a member's `job_set_fingerprint`: only members with the same
fingerprint share the roles of a slot, so an instance never counts on one that lacks the job (a
rolling deploy that adds, removes or reschedules a job)."""


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
    """Counters it published with its last heartbeat (``claims``, ``wins``, ``fallbacks``...)
    and its ``job_set`` fingerprint."""


def rendezvous_score(instance: str, job: str, slot: int) -> int:
    """The rendezvous (highest random weight) score of `instance` for (job, slot): 64 bits of
    BLAKE2b over the three, so every instance computes the same order."""
    digest = hashlib.blake2b(f"{instance}\x00{job}\x00{slot}".encode(), digest_size=8).digest()
    return int.from_bytes(digest, "big")


def _rank_key(instance: str, job: str, slot: int) -> tuple[int, str]:
    """Sorts best first: the highest score, ties broken by the smaller id."""
    return (-rendezvous_score(instance, job, slot), instance)


def contenders(members: Iterable[str], job: str, slot: int, k: int) -> list[str]:
    """The `k` members (instance ids) that contend for (job, slot), best first: the highest
    `rendezvous_score`, ties broken by id. All of them when there are `k` or fewer."""
    if k < 1:
        raise ValueError(f"k must be >= 1, got {k}")
    return sorted(set(members), key=lambda m: _rank_key(m, job, slot))[:k]


def rank_above(members: Iterable[str], me: str, job: str, slot: int, limit: int) -> int:
    """How many of `members` (other than `me`) rank above `me` for (job, slot), counted up to
    `limit` only: a member ranked far down stops after a few hashes, so deciding the roles of a
    large fleet costs each instance about `limit` x log N hashes per job, not N."""
    mine = _rank_key(me, job, slot)
    above = 0
    for name in members:
        if name != me and _rank_key(name, job, slot) < mine:
            above += 1
            if above >= limit:
                break
    return above


def all_departed(
    live: Iterable[str], departed: Collection[str], job: str, slot: int, top: int
) -> bool:
    """Whether the `top` best-ranked members for (job, slot), among `live` and `departed`
    together, are all in `departed`: nobody who was to claim it is left. Hashes the departed,
    then the live only until one ranks above the `top`-th departed (for most jobs, the first)."""
    if top < 1 or len(departed) < top:
        return False
    threshold = sorted(_rank_key(name, job, slot) for name in departed)[top - 1]
    return not any(_rank_key(name, job, slot) < threshold for name in live)


def job_set_fingerprint(signatures: Iterable[str]) -> int:
    """52 bits of BLAKE2b over the sorted job signatures (name and schedule): equal for
    instances that run the same jobs on the same schedules. 52 bits stay exact as a JSON number
    in any reader."""
    digest = hashlib.blake2b(digest_size=8)
    for signature in sorted(signatures):
        digest.update(signature.encode())
        digest.update(b"\x00")
    return int.from_bytes(digest.digest(), "big") >> 12
