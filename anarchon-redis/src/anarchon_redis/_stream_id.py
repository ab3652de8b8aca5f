"""``strategy=stream-id``: ``XADD {prefix:job}:claims <slot>-0``, one command, no script.

Redis refuses an entry ID at or below the stream's top item. The refusal does not say whose the
slot is, so it is followed by ``XRANGE <slot>-0 <slot>-0``: my token is `won` (a resent claim,
C2), another token `lost`, no entry `late` (a newer slot was claimed first, or the entry was
trimmed). The winner pays one round trip, the others two (pipelining both commands measured
slower for the winner with redis-py). Old slots can never be won again, trimmed or not: the
stream's top ID is the floor.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import redis.exceptions as rex

from anarchon import Claim, ClaimRequest, Outcome

from ._client import translated
from ._streams import StreamStore, decided, parse_entry, raise_first_error

__all__ = ["StreamIdStore"]

REFUSED = "equal or smaller than the target stream top item"


class StreamIdStore(StreamStore):
    """No-lease store: the slot is the stream entry ID."""

    strategy = "stream-id"
    batch = True

    @property
    def remembers_ms(self) -> int | None:
        return None

    def _add(self, client: Any, request: ClaimRequest) -> Any:
        """The claim's XADD on `client` (a connection or a pipeline)."""
        return client.xadd(
            self.keys(request.job).claims,
            {"slot": request.slot, "token": request.token, "holder": request.instance},
            id=f"{request.slot}-0",
            maxlen=self.options.stream_maxlen,
            approximate=False,
        )

    async def claim(self, request: ClaimRequest) -> Claim:
        if request.slot <= 0:
            return _slot_zero()
        keys = self.keys(request.job)
        client = self.client
        entry_id = f"{request.slot}-0"

        async def add() -> Any:
            try:
                await self._add(client, request)
            except rex.ResponseError as exc:
                if REFUSED not in str(exc):
                    raise
                return await client.xrange(keys.claims, entry_id, entry_id)
            return None

        return self._decide(request, await self._guarded(keys, add))

    async def claim_many(self, requests: Sequence[ClaimRequest]) -> list[Claim]:
        """Two round trips at most: every XADD pipelined, then one XRANGE per refused XADD
        (pipelined too), in request order, so the answers are those of claiming one by one."""
        batch = [r for r in requests if r.slot > 0]
        client = self.client
        pipe = client.pipeline(transaction=False)
        for request in batch:
            self._add(pipe, request)
        with translated(self.url):
            added = await pipe.execute(raise_on_error=False)
        refused = [
            i
            for i, reply in enumerate(added)
            if isinstance(reply, rex.ResponseError) and REFUSED in str(reply)
        ]
        await raise_first_error(
            self, batch, [None if i in refused else reply for i, reply in enumerate(added)]
        )
        found: dict[int, Any] = {}
        if refused:
            pipe = client.pipeline(transaction=False)
            for i in refused:
                entry_id = f"{batch[i].slot}-0"
                pipe.xrange(self.keys(batch[i].job).claims, entry_id, entry_id)
            with translated(self.url):
                read = await pipe.execute(raise_on_error=False)
            await raise_first_error(self, [batch[i] for i in refused], read)
            found = dict(zip(refused, read, strict=True))
        answers = iter(self._decide(r, found.get(i)) for i, r in enumerate(batch))
        return [next(answers) if r.slot > 0 else _slot_zero() for r in requests]

    def _decide(self, request: ClaimRequest, found: Any) -> Claim:
        """The claim's answer: `found` is None when the XADD was accepted, else what XRANGE
        read at the slot's entry ID."""
        keys = self.keys(request.job)
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


def _slot_zero() -> Claim:
    return Claim(outcome=Outcome.LATE, reason="slot 0 cannot be a stream entry ID")
