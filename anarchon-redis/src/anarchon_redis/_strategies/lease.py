"""``strategy=lease``: L1-L11 in one Lua script (``_scripts/lease.lua``) on Redis TIME.

Each job's runs are flat strings (see `_runs`) in the hash ``{prefix:job}:runs``, which also
holds the job's floor (the newest forgotten slot, L11) and its number of runs; the sorted set
``:slots`` orders the runs for history and retention, ``:leases`` holds the running slots by
lease end (the overlap rule), and the stream ``:events`` records each claim, takeover and
finish. Redis runs a script from start to
end before anything else, so every decision is one atomic step (C1).

P1: the claim script takes the job's pause hash (``{prefix:job}:pause``) as a fifth key and,
for a slot with no run yet, reads it in the same call: a paused job's slot is recorded
``skipped`` (``paused``, or ``paused: <reason>``) whatever the request says; a late slot is
still recorded late. Runs that exist go on (renew, finish, takeover). Triggered slots (X1) are
claimed by this same script: nothing in it assumes a slot is on a whole second.

A claim is one EVALSHA (or FCALL) packed by hand (`ScriptedStrategy`); `claim_many` sends the
same script with up to `BATCH` jobs per call, so the decisions of a batch are those of single
claims, made by the same code. The store forwards renew, finish, release and check here
(`anarchon_redis.RedisLeaseStore`).

The ledger (S1): a claim that decides its slot is not to run (late, a caller's skip reason,
overlap) writes a ``skipped`` run with the reason in the same script, with the texts of
`anarchon.backend` (``late_reason``, ``overlap_reason``); later claims and `check` answer
`skipped`. A finish resent after its answer was lost is recognised (C2 for finish): the same
token and status again answer True and change nothing.
"""

from __future__ import annotations

import functools
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any
from urllib.parse import unquote

import attrs
import redis.asyncio as aioredis

from anarchon.backend import (
    LEASE_STORE,
    MAX_SLOT_MS,
    Capabilities,
    Claim,
    ClaimRequest,
    HistoryReader,
    Overlap,
    RunRecord,
    RunStatus,
    StoreCorrupt,
    claim_from_outcome,
    decide_claim,
    keep_until,
    shown,
)

from .. import _wire as wire
from .._client import Script, guarded
from .._keys import JobKeys
from .._runs import run_from_value
from .._wire import bulk, call_many, command
from .scripted import ScriptedStrategy

if TYPE_CHECKING:
    from .._connection import Link
    from .._options import RedisOptions

__all__ = ["LEASE", "LeaseStrategy"]

LEASE = Script("lease.lua", claims=True, entry="lease")
TIME = wire.command(["TIME"])
CAPABILITIES = attrs.evolve(LEASE_STORE, batch=True, pause=True, trigger=True, retries=True)


class LeaseStrategy(ScriptedStrategy):
    """Leases in Redis: claims, renew, finish and release are one script each call."""

    name = "lease"
    run_key = "runs"
    keys_per_job = 5

    def __init__(self, options: RedisOptions) -> None:
        super().__init__(options)
        self._option = bulk(f"claim {self.options.history_limit}")
        self._margin = self.options.retention_margin_ms

    @property
    def capabilities(self) -> Capabilities:
        return CAPABILITIES

    async def setup(self, link: Link) -> None:
        self.functions = await LEASE.load_function(link.client)

    def _script_keys(self, keys: JobKeys) -> list[str]:
        return [*keys.lease_keys(), keys.pause]

    def _ask(self, request: ClaimRequest) -> str:
        r = request
        skip = 1 if r.overlap is Overlap.SKIP else 0
        reason = r.skip_reason
        tail = (
            f"0 {r.instance}" if reason is None else f"{len(reason.encode())} {reason}{r.instance}"
        )
        return (
            f"{r.slot} {r.token} {r.lease_ms} {r.max_late_ms} {skip} {r.attempts} "
            f"{keep_until(r, self._margin)} {tail}"
        )

    async def claim(self, link: Link, request: ClaimRequest) -> Claim:
        return await self._decided_one(link, LEASE, self._option, request, _claim_from_answer)

    async def claim_many(self, link: Link, requests: Sequence[ClaimRequest]) -> list[Claim]:
        """The claim script with up to `BATCH` jobs per call (see `ScriptedStrategy._decided`); every
        job gets the answer its single claim would get."""
        if not requests:
            return []
        return await self._decided(link, LEASE, self._option, requests, _claim_from_answer)

    async def check(self, link: Link, request: ClaimRequest) -> Claim:
        """L10: one plain read (HGET and TIME, pipelined, no script); the claim script only when
        the run is missing or its lease ran out."""
        keys = self.keys(request.job)
        if link.topology.kind == "cluster":
            # HGET and TIME packed together for the node that holds the run: its own clock, as
            # the claim script reads it (a cluster pipeline refuses TIME).
            packed = wire.command(["HGET", keys.runs, str(request.slot)]) + TIME

            async def read() -> Any:
                replies = await link.routed(keys.tag, lambda pool: wire.call_many(pool, packed, 2))
                for reply in replies:
                    if isinstance(reply, Exception):
                        raise reply
                return replies

        else:
            pipe = link.client.pipeline(transaction=False)
            pipe.hget(keys.runs, str(request.slot))
            pipe.time()

            async def read() -> Any:
                return await pipe.execute()

        raw, (seconds, micros) = await guarded(link.client, link.url, keys, [keys.runs], read)
        if raw is not None:
            now = int(seconds) * 1000 + int(micros) // 1000
            run = run_from_value(raw, request.job, request.slot, keys.runs)
            if run.status.finished or (run.lease_until is not None and run.lease_until >= now):
                claim, _ = decide_claim(run, request, now, floor=None, other_live=lambda: None)
                # With durability options a `won` read here (the caller's own run, L2) is not
                # known to be on a replica: the claim script below says so with its WAIT (C3).
                if not (claim.won and link.confirm is not None):
                    return claim
        return await self.claim(link, request)

    async def _update(self, link: Link, job: str, args: list[Any]) -> bool:
        keys = self.keys(job)
        client = link.client
        names = keys.lease_keys()
        confirm = link.confirm
        if confirm is None:
            reply = await guarded(client, link.url, keys, names, lambda: LEASE(client, names, args))
            return bool(reply == 1)
        # Durability: the script, then the ack write and WAIT, in one round trip (_durability).
        packed = command(["EVALSHA", LEASE.sha, str(len(names)), *names, *map(str, args)])
        whole = packed + confirm.packed(keys.ack)

        async def send(pool: wire.Pool) -> tuple[Any, str | None]:
            replies = await call_many(pool, whole, 1 + confirm.count)
            if Script.missing(replies[0]):
                await LEASE.load(client, self.functions)
                replies = await call_many(pool, whole, 1 + confirm.count)
            if isinstance(replies[0], Exception):
                raise replies[0]  # MOVED: `routed` sends it again to the slot's new node
            return replies[0], confirm.shortfall(link.url, replies[1:])

        async def confirmed() -> tuple[Any, str | None]:
            if link.topology.kind == "cluster":  # WAIT on the node that took the write
                return await link.routed(keys.tag, send)
            return await send(client.connection_pool)

        reply, shortfall = await guarded(client, link.url, keys, names, confirmed)
        done = bool(reply == 1)
        if done:  # a refusal (False) stands: it wrote nothing the replicas need
            confirm.write(link.url, str(args[0]), shortfall)
        return done

    async def renew(self, link: Link, job: str, slot: int, token: str, lease_ms: int) -> bool:
        return await self._update(link, job, ["renew", slot, token, lease_ms])

    async def finish(
        self,
        link: Link,
        job: str,
        slot: int,
        token: str,
        status: RunStatus,
        error: str | None = None,
    ) -> bool:
        if not status.finished or status is RunStatus.SKIPPED:
            raise ValueError(f"finish needs succeeded, failed or interrupted, got {status}")
        return await self._update(
            link,
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

    async def release(self, link: Link, job: str, slot: int, token: str) -> bool:
        return await self._update(link, job, ["release", slot, token])

    async def retry(
        self, link: Link, job: str, slot: int, token: str, error: str, delay_ms: int
    ) -> bool:
        """L12: the script logs the failed try and holds the run for `delay_ms` (Redis TIME)."""
        return await self._update(link, job, ["retry", slot, token, error, delay_ms])

    async def history(self, link: Link, job: str, limit: int = 100) -> list[RunRecord]:
        keys = self.keys(job)
        client = link.client

        async def read() -> list[tuple[str, str | UnicodeDecodeError | None]]:
            slots: Any = await client.zrevrange(keys.slots, 0, max(limit, 1) - 1)
            if not slots or limit < 1:
                return []
            try:
                values: Any = await client.hmget(keys.runs, slots)
            except UnicodeDecodeError:  # a value is not UTF-8: find it, read the others
                values = [await _field(client, keys.runs, slot) for slot in slots]
            return list(zip(slots, values, strict=True))

        rows = await guarded(client, link.url, keys, [keys.slots, keys.runs], read)
        # A run that cannot be read is reported with the others (`DamagedHistory`).
        reader = HistoryReader(job)
        for member, raw in rows:
            slot = _slot(member)
            if slot is None:
                reader.damage(
                    f"{keys.slots} member {shown(member)}",
                    f"Redis key {keys.slots} of job {job!r} has member {shown(member)}; "
                    "expected a slot in epoch milliseconds: remove the member (ZREM) and the "
                    f"field of the same name in {keys.runs}",
                )
            elif isinstance(raw, UnicodeDecodeError):
                reader.damage(
                    f"{keys.runs} field {slot}",
                    f"Redis key {keys.runs} field {slot} holds bytes that are not UTF-8 text "
                    f"({raw.reason} at byte {raw.start}); anarchon writes only UTF-8: remove "
                    "or repair the field",
                    slot=slot,
                )
            elif raw is not None:
                reader.read(
                    functools.partial(run_from_value, raw, job, slot, keys.runs),
                    key=f"{keys.runs} field {slot}",
                    slot=slot,
                )
        return reader.result()


def _claim_from_answer(request: ClaimRequest, answer: str) -> Claim:
    """One job's answer from the claim script (see ``lease.lua``) as a `Claim`."""
    reason = None
    if answer.startswith("skipped "):  # S1: with token, reason (one word) and holder, always
        parts = answer.split(" ", 8)
        if len(parts) != 9:
            raise StoreCorrupt(
                f"Redis answered {answer!r} to the claim script for job {request.job!r}"
            )
        token, reason, holder = parts[6], unquote(parts[7]), _unescaped(parts[8])
    else:
        parts = answer.split(" ", 7)
        if len(parts) == 6:  # the run is the caller's own, or there is none
            token, holder = request.token, request.instance
        elif len(parts) == 8:
            token, holder = parts[6], _unescaped(parts[7])
        else:
            raise StoreCorrupt(
                f"Redis answered {answer!r} to the claim script for job {request.job!r}"
            )
    outcome, attempt, lease, status, now, floor = parts[:6]
    try:
        decided = outcome != "late"
        return claim_from_outcome(
            request,
            outcome,
            attempt=int(attempt) if decided else 0,
            token=token,
            holder=holder,
            lease_until=int(lease) if lease != "-" else None,
            status=status,
            now=int(now),
            floor=None if floor == "-" else int(floor),
            reason=reason,
        )
    except ValueError:
        raise StoreCorrupt(
            f"Redis answered {answer!r} to the claim script for job {request.job!r}"
        ) from None


async def _field(client: aioredis.Redis, key: str, field: str) -> str | UnicodeDecodeError | None:
    try:
        value: Any = await client.hget(key, field)
    except UnicodeDecodeError as exc:
        return exc
    return value  # type: ignore[no-any-return]


def _slot(member: str) -> int | None:
    """A member of the job's :slots as a slot, or None when it is not one anarchon writes."""
    if not (member.isascii() and member.isdigit() and len(member) <= MAX_SLOT_DIGITS):
        return None
    slot = int(member)
    return slot if slot <= MAX_SLOT_MS else None


MAX_SLOT_DIGITS = len(str(MAX_SLOT_MS))


def _unescaped(holder: str) -> str:
    """A holder as ``batch.lua`` escaped it (``%`` as %25, newlines as %0A)."""
    return unquote(holder) if "%" in holder else holder
