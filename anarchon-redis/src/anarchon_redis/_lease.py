"""``strategy=lease``: L1-L11 in one Lua script (``_scripts/lease.lua``) on Redis TIME.

Each job's runs are flat strings (see `_runs`) in the hash ``{prefix:job}:runs``; the sorted
sets ``:slots`` and ``:leases`` index them for retention and the overlap rule, ``:floor`` holds
the newest forgotten slot (L11), and the stream ``:events`` records each claim, takeover and
finish. Redis runs a script from start to end before anything else, so every decision is one
atomic step (C1).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import redis.asyncio as aioredis
import redis.exceptions as rex

from anarchon import (
    Capabilities,
    Claim,
    ClaimRequest,
    LeaseStore,
    Outcome,
    Overlap,
    RunRecord,
    RunStatus,
    StoreCorrupt,
)
from anarchon._leases import decide_claim, keep_until, late_reason

from ._client import Script, guarded, reraising, server_now_ms, translated
from ._keys import JobKeys
from ._runs import run_from_value
from ._store import RedisStore

__all__ = ["RedisLeaseStore"]

LEASE = Script("lease.lua")


class RedisLeaseStore(RedisStore, LeaseStore):
    """Lease store in Redis: claims, renew, finish and release are one script each call."""

    strategy = "lease"

    @property
    def capabilities(self) -> Capabilities:
        return Capabilities(
            leases=True,
            self_recognition=True,
            fencing=True,
            overlap=True,
            history=True,
            store_clock=True,
            batch=True,
            remembers_ms=None,
        )

    async def _prepare(self, client: aioredis.Redis) -> None:
        await LEASE.load(client)

    def _claim_args(self, request: ClaimRequest) -> list[Any]:
        skip = 1 if request.overlap is Overlap.SKIP else 0
        packed = (
            f"{request.slot} {request.token} {request.lease_ms} {request.max_late_ms} {skip} "
            f"{request.attempts} {keep_until(request, self.options.retention_margin_ms)} "
            f"{self.options.history_limit}"
        )
        return ["claim", packed, request.instance]

    async def _run(self, keys: JobKeys, args: list[Any]) -> Any:
        client = self.client
        return await guarded(
            client,
            self.url,
            keys,
            keys.lease_keys(),
            lambda: LEASE(client, keys.lease_keys(), args),
        )

    async def claim(self, request: ClaimRequest) -> Claim:
        keys = self.keys(request.job)
        names = keys.lease_keys()
        args = self._claim_args(request)
        try:  # the usual case first, with nothing around it: this is the hot path
            reply = await self.client.evalsha(LEASE.sha, 5, *names, *args)
        except rex.NoScriptError:  # a restart or SCRIPT FLUSH forgot the script: send it whole
            reply = await self._run(keys, args)
        except (rex.RedisError, OSError) as exc:
            reply = await guarded(self.client, self.url, keys, names, reraising(exc))
        return _claim_from_reply(reply, request, keys)

    async def claim_many(self, requests: Sequence[ClaimRequest]) -> list[Claim]:
        """One round trip: the claim scripts of all requests, pipelined (each job's keys stay in
        their own hash slot; each script is atomic on its own)."""
        if not requests:
            return []
        client = self.client
        calls = [(self.keys(r.job).lease_keys(), self._claim_args(r)) for r in requests]
        replies = await LEASE.pipelined(client, self.url, calls)
        claims = []
        for request, reply in zip(requests, replies, strict=True):
            keys = self.keys(request.job)
            if isinstance(reply, Exception):
                await guarded(client, self.url, keys, keys.lease_keys(), reraising(reply))
            claims.append(_claim_from_reply(reply, request, keys))
        return claims

    async def check(self, request: ClaimRequest) -> Claim:
        """L10: one plain read (HGET and TIME, pipelined, no script); the claim script only when
        the run is missing or its lease ran out."""
        keys = self.keys(request.job)
        pipe = self.client.pipeline(transaction=False)
        pipe.hget(keys.runs, str(request.slot))
        pipe.time()

        async def read() -> Any:
            return await pipe.execute()

        raw, (seconds, micros) = await guarded(self.client, self.url, keys, [keys.runs], read)
        if raw is not None:
            now = int(seconds) * 1000 + int(micros) // 1000
            run = run_from_value(raw, request.job, request.slot, keys.runs)
            if run.status.finished or (run.lease_until is not None and run.lease_until >= now):
                claim, _ = decide_claim(run, request, now, floor=None, other_live=lambda: False)
                return claim
        return await self.claim(request)

    async def _update(self, job: str, args: list[Any]) -> bool:
        reply = await self._run(self.keys(job), args)
        return bool(reply == 1)

    async def renew(self, job: str, slot: int, token: str, lease_ms: int) -> bool:
        return await self._update(job, ["renew", slot, token, lease_ms])

    async def finish(
        self, job: str, slot: int, token: str, status: RunStatus, error: str | None = None
    ) -> bool:
        if not status.finished:
            raise ValueError(f"finish needs a final status, got {status}")
        return await self._update(
            job,
            [
                "finish",
                slot,
                token,
                status.value,
                0 if error is None else 1,
                error or "",
                self.options.history_limit,
            ],
        )

    async def release(self, job: str, slot: int, token: str) -> bool:
        return await self._update(job, ["release", slot, token])

    async def history(self, job: str, limit: int = 100) -> list[RunRecord]:
        keys = self.keys(job)
        client = self.client

        async def read() -> list[tuple[int, str | None]]:
            slots: Any = await client.zrevrange(keys.slots, 0, max(limit, 1) - 1)
            if not slots or limit < 1:
                return []
            values: Any = await client.hmget(keys.runs, slots)
            return [(int(s), v) for s, v in zip(slots, values, strict=True)]

        rows = await guarded(client, self.url, keys, [keys.slots, keys.runs], read)
        return [run_from_value(raw, job, slot, keys.runs) for slot, raw in rows if raw is not None]

    async def now_ms(self) -> int:
        with translated(self.url):
            return await server_now_ms(self.client)


def _claim_from_reply(reply: Any, request: ClaimRequest, keys: JobKeys) -> Claim:
    """The script's one-string answer (see ``lease.lua``) as a `Claim`."""
    try:
        outcome, attempt_s, lease_s, status, now_s, floor_s, token, holder = reply.split(" ", 7)
        attempt, now = int(attempt_s), int(now_s)
        lease = None if lease_s == "-" else int(lease_s)
        floor = None if floor_s == "-" else int(floor_s)
    except (TypeError, ValueError, AttributeError):
        raise StoreCorrupt(
            f"Redis answered {reply!r} to the claim script for {keys.runs}"
        ) from None
    if outcome == "won":
        return Claim(
            outcome=Outcome.WON, attempt=attempt, token=token, holder=holder, lease_until=lease
        )
    if outcome == "running":
        return Claim(
            outcome=Outcome.RUNNING, attempt=attempt, token=token, holder=holder, lease_until=lease
        )
    if outcome == "late":
        return Claim(outcome=Outcome.LATE, reason=late_reason(request, now, floor) or "late")
    if outcome == "overlap":
        return Claim(
            outcome=Outcome.OVERLAP,
            reason="another run of this job holds a live lease and overlap is 'skip'",
        )
    if outcome in ("done", "interrupted"):
        reason = (
            f"run {status}"
            if outcome == "done"
            else "run interrupted: the last attempt's lease ran out"
        )
        return Claim(
            outcome=Outcome.DONE,
            attempt=attempt,
            token=token,
            holder=holder,
            lease_until=lease,
            reason=reason,
        )
    raise StoreCorrupt(f"Redis answered outcome {outcome!r} to the claim script for {keys.runs}")
