"""Claims as the scheduler sends them: resent with the same token after `StoreUnavailable`.

Light on purpose (no pytest): the C1 process check's claimers import it too.
"""

from __future__ import annotations

import asyncio

from anarchon import Claim, ClaimRequest, ClaimStore, StoreUnavailable

__all__ = ["RESENDS", "claim_as_scheduled"]

RESENDS = 5
"""How often `claim_as_scheduled` resends a claim that failed with `StoreUnavailable`."""


async def claim_as_scheduled(store: ClaimStore, request: ClaimRequest) -> Claim:
    """`store.claim(request)` as the scheduler makes it: a claim that fails with
    `StoreUnavailable` (the store says it may be resent) is sent again with the same token, a
    few times (C2, or C3 for stores without self-recognition, make that safe). A store is allowed
    such failures under load, such as RabbitMQ 3.10 refusing a declaration that races another
    connection's creation of the same queue; the single-winner checks must not count them as
    broken processes."""
    for resend in range(RESENDS + 1):
        try:
            return await store.claim(request)
        except StoreUnavailable:
            if resend == RESENDS:
                raise
            await asyncio.sleep(0.05 * (resend + 1))
    raise AssertionError("unreachable")
