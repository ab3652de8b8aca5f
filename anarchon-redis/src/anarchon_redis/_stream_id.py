"""``strategy=stream-id``: ``XADD {prefix:job}:claims <slot>-0``, one command, no script.

Redis refuses an entry ID at or below the stream's top item. The refusal does not say whose the
slot is, so it is followed by ``XRANGE <slot>-0 <slot>-0``: my token is `won` (a resent claim,
C2), another token `lost`, no entry `late` (a newer slot was claimed first, or the entry was
trimmed). The winner pays one round trip, the others two (pipelining both commands measured
slower for the winner with redis-py). Old slots can never be won again, trimmed or not: the
stream's top ID is the floor.
"""

from __future__ import annotations

from typing import Any

import redis.exceptions as rex

from anarchon import Claim, ClaimRequest, Outcome

from ._streams import StreamStore, decided, parse_entry

__all__ = ["StreamIdStore"]

REFUSED = "equal or smaller than the target stream top item"


class StreamIdStore(StreamStore):
    """No-lease store: the slot is the stream entry ID."""

    strategy = "stream-id"

    @property
    def remembers_ms(self) -> int | None:
        return None

    async def claim(self, request: ClaimRequest) -> Claim:
        if request.slot <= 0:
            return Claim(outcome=Outcome.LATE, reason="slot 0 cannot be a stream entry ID")
        keys = self.keys(request.job)
        client = self.client
        entry_id = f"{request.slot}-0"
        fields = {"slot": request.slot, "token": request.token, "holder": request.instance}

        async def add() -> Any:
            try:
                await client.xadd(
                    keys.claims,
                    fields,  # type: ignore[arg-type]
                    id=entry_id,
                    maxlen=self.options.stream_maxlen,
                    approximate=False,
                )
            except rex.ResponseError as exc:
                if REFUSED not in str(exc):
                    raise
                return await client.xrange(keys.claims, entry_id, entry_id)
            return None

        found = await self._guarded(keys, add)
        if found is None:
            return decided(True, request.token, request.instance)
        if not found:
            return Claim(
                outcome=Outcome.LATE,
                reason=(
                    f"late: a newer slot of job {request.job!r} was claimed first, or this slot's "
                    "entry was trimmed; stream-id never claims a slot below the stream's top"
                ),
            )
        _, _, token, holder = parse_entry(found[0], keys.claims)
        return decided(token == request.token, token, holder)
