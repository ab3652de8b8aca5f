"""``strategy=idmp``: ``XADD {prefix:job}:claims IDMP <job> <slot> * ...`` (Redis 8.6+).

Redis keeps the first entry of an idempotency key (producer = the job, so every instance acts as
one producer; id = the slot) and answers a repeat with that entry's ID and no flag. So the XADD
and the read-back of the entry Redis answers (``XRANGE id id``) run in one small script
(``_scripts/idmp.lua``, one round trip): the entry is mine (`won`, also for my resent claim, C2)
or another token's (`lost`); a trimmed one is `lost`. `claim_many` runs the same script for up
to `BATCH` jobs per call. A skip (S1) is the same XADD with the field ``skip`` (the reason):
`skipped` for the writer and for every claim that reads the entry back.

C5: Redis remembers an idempotency id for ``IDMP-DURATION`` counted from when it is written, so
the script refuses (by Redis ``TIME``, the clock lateness is judged by) a claim written earlier
than ``slot + max_late - duration``, which Redis could forget while the slot can still be
claimed: `anarchon.backend.early_claim_error` is raised, and nothing is written.

The XADD never creates the stream (``NOMKSTREAM``): a stream that vanished is configured again
first. Each job's stream gets ``IDMP-DURATION``/``IDMP-MAXSIZE`` once (``_scripts/idmp_config.lua``),
when a scheduler starts (`setup_jobs`) or at the job's first claim: a stream set to other values
by another instance is a `ConfigError` (the scheduler refuses to start), since changing them
would wipe the remembered claims.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

import redis.asyncio as aioredis
import redis.exceptions as rex

from anarchon.backend import (
    Claim,
    ClaimRequest,
    ConfigError,
    Outcome,
    StoreCorrupt,
    StoreUnavailable,
)

from .. import _wire as wire
from .._client import Script
from .._keys import JobKeys
from .._wire import bulk
from .streams import StreamStrategy, answered, refuse_early, skip_tail

if TYPE_CHECKING:
    from .._connection import Link
    from .._options import RedisOptions

__all__ = ["CONFIG", "IDMP", "IdmpStrategy"]

CONFIG = Script("idmp_config.lua")
IDMP = Script("idmp.lua", claims=True, entry="idmp")


class IdmpStrategy(StreamStrategy):
    """No-lease: Redis' idempotent XADD."""

    name = "idmp"

    def __init__(self, options: RedisOptions) -> None:
        super().__init__(options)
        self._configured: set[str] = set()
        self._option = bulk(f"claim {self.options.stream_maxlen}")

    def _ask(self, request: ClaimRequest) -> str:
        ahead = self.options.idmp_duration_sec * 1000 - request.max_late_ms
        return f"{request.job} {request.slot} {request.token} {ahead} {skip_tail(request)}"

    @property
    def remembers_ms(self) -> int | None:
        return self.options.idmp_duration_sec * 1000

    async def setup(self, link: Link) -> None:
        client = link.client
        if not await _has_xcfgset(client):
            server = await client.info("server")
            version = server.get("valkey_version") or server.get("redis_version", "?")
            name = "Valkey" if "valkey_version" in server else "Redis"
            raise ConfigError(
                f"strategy=idmp needs Redis 8.6+ (XADD IDMP and XCFGSET); {link.url} runs "
                f"{name} {version}: use strategy=script, which works on every Redis and Valkey"
            )
        await CONFIG.load(client)
        self.functions = await IDMP.load_function(client)

    def _check_settings(self, keys: JobKeys, current: Any) -> None:
        """`current` is the configuration script's answer: the stream's settings in force."""
        wanted = f"{self.options.idmp_duration_sec} {self.options.idmp_maxsize}"
        if current != wanted:
            duration, _, maxsize = str(current).partition(" ")
            raise ConfigError(
                f"Redis stream {keys.claims} has IDMP-DURATION {duration} s and IDMP-MAXSIZE "
                f"{maxsize}, set by another instance; this one has duration_sec="
                f"{self.options.idmp_duration_sec} and maxsize={self.options.idmp_maxsize}. "
                "Changing them would make Redis forget the claims: give every instance the "
                f"same options (duration_sec={duration}&maxsize={maxsize})"
            )
        self._configured.add(keys.job)

    async def _configure_many(self, link: Link, jobs: Sequence[str]) -> None:
        """Give the streams of `jobs` their IDMP settings once (``idmp_config.lua``, one call per
        job, all sent on one connection), or refuse settings another instance chose. The
        settings already chosen are read first (one pipelined round trip), so that an instance
        whose options conflict for one job refuses before it gives its own to the others."""
        pipe = link.client.pipeline(transaction=False)
        for job in jobs:
            pipe.get(self.keys(job).idmp_config)
        try:
            chosen = await pipe.execute()
        except (rex.RedisError, OSError) as exc:
            await self._refuse(link, jobs[0], exc)
        for job, current in zip(jobs, chosen, strict=True):
            if current is not None:
                self._check_settings(self.keys(job), current)
        args = bulk(str(self.options.idmp_duration_sec)) + bulk(str(self.options.idmp_maxsize))
        calls = []
        for job in jobs:
            keys = self.keys(job)
            packed = bulk(keys.claims) + bulk(keys.idmp_config)
            calls.append(wire.invoke(CONFIG.eval_head, 2, packed, 2, args))
        replies: dict[int, Any] = {}
        try:
            # One connection per node in a cluster (a call touches one job's hash slot).
            for pool, indexes in await link.pools_for([self.keys(job).tag for job in jobs]):

                def take(k: int, reply: Any, indexes: list[int] = indexes) -> None:
                    replies[indexes[k]] = reply

                await CONFIG.send(link.client, [calls[i] for i in indexes], take, pool=pool)
        except (rex.RedisError, rex.RedisClusterException, OSError) as exc:
            await self._refuse(link, jobs[0], exc)
        for i, job in enumerate(jobs):
            if isinstance(replies[i], Exception):
                await self._refuse(link, job, replies[i])
            self._check_settings(self.keys(job), replies[i])

    async def setup_jobs(self, link: Link, jobs: Sequence[str]) -> None:
        """`anarchon.abc.SupportsJobSetup`: give the streams of `jobs` their IDMP settings when a
        scheduler starts, so that settings another instance chose refuse the start
        (`ConfigError`) instead of failing each claim of the job. Claims configure a job the
        store has not set up themselves (for callers without a scheduler)."""
        new = [*dict.fromkeys(job for job in jobs if job not in self._configured)]
        if new:
            await self._configure_many(link, new)

    async def claim(self, link: Link, request: ClaimRequest) -> Claim:
        if request.job not in self._configured:
            await self._configure_many(link, [request.job])
        claim = await self._decided_one(link, IDMP, self._option, request, self._decide)
        if claim is None:  # the stream vanished: claim_many configures it again and retries
            (claim,) = await self.claim_many(link, [request])
        return claim

    async def claim_many(self, link: Link, requests: Sequence[ClaimRequest]) -> list[Claim]:
        """The claim script (see the module's doc) for up to `BATCH` jobs per call, after
        configuring the streams of jobs this store has not configured yet."""
        if not requests:
            return []
        new = [*dict.fromkeys(r.job for r in requests if r.job not in self._configured)]
        if new:
            await self._configure_many(link, new)
        claims = await self._decided(link, IDMP, self._option, requests, self._decide)
        gone = [i for i, claim in enumerate(claims) if claim is None]
        if gone:
            # NOMKSTREAM: the stream is gone (deleted, or a flush), and a stream XADD created would
            # have Redis' default IDMP settings: configure it again, then claim.
            again = [requests[i] for i in gone]
            self._configured.difference_update(r.job for r in again)
            await self._configure_many(link, [*dict.fromkeys(r.job for r in again)])
            retried = await self._decided(link, IDMP, self._option, again, self._decide)
            for i, claim in zip(gone, retried, strict=True):
                if claim is None:
                    raise StoreUnavailable(
                        f"Redis stream {self.keys(requests[i].job).claims} vanished twice during "
                        "a claim"
                    )
                claims[i] = claim
        return [c for c in claims if c is not None]

    def _decide(self, request: ClaimRequest, answer: str) -> Claim | None:
        """The claim script's answer ``<state>[ <token> <holder>...]`` as a `Claim`; None for
        ``gone`` (the stream must be configured again); ``early`` raises `ConfigError` (C5)."""
        state, _, rest = answer.partition(" ")
        if state == "gone":
            return None
        claim = answered(request, state, rest)  # a new entry is read back too: never "added"
        if claim is not None:
            return claim
        if state == "trimmed":
            return Claim(
                outcome=Outcome.LOST,
                attempt=1,
                reason="the slot was claimed and its entry trimmed from the stream",
            )
        if state == "early":
            refuse_early(request, rest, self.options.idmp_duration_sec * 1000)
        raise StoreCorrupt(f"Redis answered {answer!r} to the claim script for job {request.job!r}")


async def _has_xcfgset(client: aioredis.Redis) -> bool:
    """``COMMAND INFO XCFGSET``: Redis 8.6+ describes it, older servers answer a nil entry (which
    redis-py's reply parser cannot read: a TypeError there means "unknown command")."""
    try:
        found = await client.execute_command("COMMAND", "INFO", "XCFGSET")  # type: ignore[no-untyped-call]
    except TypeError:
        return False
    return bool(found) and "xcfgset" in {str(name).lower() for name in found}
