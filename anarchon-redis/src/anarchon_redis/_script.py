"""``strategy=script``: a Lua script (``_scripts/window.lua``) scans the job's claim stream for
the slot among the entries of the last `window_ms` (by Redis TIME), appends the claim if there is
none, and answers the token that holds the slot. Like idmp, on servers without it (Valkey, Redis
before 8.6). A slot older than the window is `late`: the store no longer knows (T3)."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import redis.asyncio as aioredis

from anarchon import Claim, ClaimRequest, Outcome, StoreCorrupt

from ._client import Script
from ._streams import StreamStore, decided, raise_first_error

__all__ = ["ScriptStore"]

WINDOW = Script("window.lua")


class ScriptStore(StreamStore):
    """No-lease store: a windowed scan and append in one script."""

    strategy = "script"
    batch = True

    @property
    def remembers_ms(self) -> int | None:
        return self.options.script_window_ms

    async def _prepare(self, client: aioredis.Redis) -> None:
        await WINDOW.load(client)

    def _args(self, request: ClaimRequest) -> list[Any]:
        window = self.options.script_window_ms
        return [request.slot, request.token, request.instance, window, request.max_late_ms]

    async def claim(self, request: ClaimRequest) -> Claim:
        keys = self.keys(request.job)
        client = self.client
        args = self._args(request)
        reply = await self._guarded(keys, lambda: WINDOW(client, [keys.claims], args))
        return self._decide(request, reply)

    async def claim_many(self, requests: Sequence[ClaimRequest]) -> list[Claim]:
        """One round trip: the scripts of all requests pipelined, in order (each is atomic on
        its own job's stream); the script is sent whole once if the server forgot it."""
        calls = [([self.keys(r.job).claims], self._args(r)) for r in requests]
        replies = await WINDOW.pipelined(self.client, self.url, calls)
        await raise_first_error(self, requests, replies)
        return [self._decide(r, reply) for r, reply in zip(requests, replies, strict=True)]

    def _decide(self, request: ClaimRequest, reply: Any) -> Claim:
        keys = self.keys(request.job)
        window = self.options.script_window_ms
        try:
            state, token, holder, _, now = reply
            age = int(now) - request.slot
        except (TypeError, ValueError):
            raise StoreCorrupt(
                f"Redis answered {reply!r} to the claim script for {keys.claims}"
            ) from None
        if state == "forgotten":
            return Claim(
                outcome=Outcome.LATE,
                reason=f"forgotten: slot is {age} ms old, older than window_ms={window}",
            )
        if state == "late":
            return Claim(
                outcome=Outcome.LATE,
                reason=f"late: slot is {age} ms old, max_late is {request.max_late_ms} ms",
            )
        return decided(token == request.token, token, holder)
