"""L11 in steady state, for the stores that sweep on a sample of wins (SQLite, PostgreSQL): a
job's history filled three times over through `claim` or `claim_many` stays within a bound of
its limit, the floor keeps up with it, and a forgotten slot is late. Shared by those stores' tests."""

from __future__ import annotations

from collections.abc import Callable

from anarchon import ClaimRequest, LeaseStore, Outcome, Overlap, RunStatus, SupportsClaimMany
from anarchon.backend import sweep_every

__all__ = ["LIMIT", "check_full_history"]

LIMIT = 256
"""One win in 16 sweeps (256 / 16)."""


def _request(job: str, slot: int) -> ClaimRequest:
    return ClaimRequest(
        job=job,
        slot=slot,
        instance="t:1:0",
        lease_ms=1_000,
        max_late_ms=1_000,
        overlap=Overlap.ALLOW,
        attempts=1,
    )


async def check_full_history(
    store: LeaseStore,
    clock: Callable[[], int],
    advance: Callable[[int], None],
    *,
    batch: bool,
    sweep_max: int,
    runs_of: Callable[[str], int],
    floor_of: Callable[[str], int | None],
) -> None:
    """`store` was opened with ``history_limit=LIMIT, retention_margin_ms=1`` on the manual
    clock (`clock`, `advance`); `runs_of` and `floor_of` read the store behind its back."""
    jobs = ["a", "b"]
    slot = clock()
    for n in range(3 * LIMIT):
        slot = clock()
        requests = [_request(job, slot) for job in jobs]
        if batch:
            assert isinstance(store, SupportsClaimMany)
            claims = await store.claim_many(requests)
        else:
            claims = [await store.claim(r) for r in requests]
        assert all(c.won for c in claims), claims
        for r in requests:
            assert await store.finish(r.job, slot, r.token, RunStatus.SUCCEEDED)
        advance(1_000)  # each run is past keep_until (slot + 1 s + 1 s + 1 ms) soon
        if n == LIMIT:  # the history is full from here on
            assert runs_of("a") <= LIMIT + LIMIT // 16 + 1
    bound = LIMIT + min(sweep_max, 8 * sweep_every(LIMIT))
    for job in jobs:
        count = runs_of(job)
        assert LIMIT <= count <= bound, f"{job}: {count} runs kept, limit {LIMIT}"
        floor = floor_of(job)
        assert floor is not None and floor >= slot - (count + 1) * 1_000, floor
        old = await store.claim(
            ClaimRequest(job=job, slot=floor, instance="late:1:0", max_late_ms=10**9)
        )
        assert old.outcome is Outcome.LATE, f"a forgotten slot was claimable: {old}"
