"""``strategy=idmp``: ``XADD {prefix:job}:claims IDMP <job> <slot> * ...`` (Redis 8.6+).

Redis keeps the first entry of an idempotency key (producer = the job, so every instance acts as
one producer; id = the slot) and answers a repeat with that entry's ID and no flag. The XADD and
a read of the stream's top entry go in one MULTI/EXEC, so the usual answer takes one round trip:
the entry is mine (`won`, also for my resent claim, C2) or another token's (`lost`); when the
original entry is not the top one, it is read with ``XRANGE id id``, and a trimmed one is `lost`.

The XADD never creates the stream (``NOMKSTREAM``): a stream that vanished is configured again
first. Each job's stream gets ``IDMP-DURATION``/``IDMP-MAXSIZE`` once (``_scripts/idmp_config.lua``): a
stream set to other values by another instance is a `ConfigError`, since changing them would
wipe the remembered claims.
"""

from __future__ import annotations

from typing import Any

import redis.asyncio as aioredis

from anarchon import Claim, ClaimRequest, ConfigError, Outcome, StoreUnavailable

from ._client import Script
from ._keys import JobKeys
from ._streams import StreamStore, decided, parse_entry

__all__ = ["IdmpStore"]

CONFIG = Script("idmp_config.lua")


class IdmpStore(StreamStore):
    """No-lease store: Redis' idempotent XADD."""

    strategy = "idmp"

    def __init__(self, *args: Any) -> None:
        super().__init__(*args)
        self._configured: set[str] = set()

    @property
    def remembers_ms(self) -> int | None:
        return self.options.idmp_duration_sec * 1000

    async def _prepare(self, client: aioredis.Redis) -> None:
        if not await _has_xcfgset(client):
            server = await client.info("server")
            version = server.get("valkey_version") or server.get("redis_version", "?")
            name = "Valkey" if "valkey_version" in server else "Redis"
            raise ConfigError(
                f"strategy=idmp needs Redis 8.6+ (XADD IDMP and XCFGSET); {self.url} runs "
                f"{name} {version}: use strategy=script, which works on every Redis and Valkey"
            )
        await CONFIG.load(client)

    async def _configure(self, keys: JobKeys) -> None:
        client = self.client
        wanted = f"{self.options.idmp_duration_sec} {self.options.idmp_maxsize}"
        args = [self.options.idmp_duration_sec, self.options.idmp_maxsize]
        current = await self._guarded(
            keys, lambda: CONFIG(client, [keys.claims, keys.idmp_config], args)
        )
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

    async def claim(self, request: ClaimRequest) -> Claim:
        keys = self.keys(request.job)
        if request.job not in self._configured:
            await self._configure(keys)
        client = self.client

        async def add() -> Any:
            pipe = client.pipeline(transaction=True)
            pipe.execute_command(
                "XADD",
                keys.claims,
                "NOMKSTREAM",
                "IDMP",
                request.job,
                request.slot,
                "MAXLEN",
                "=",
                self.options.stream_maxlen,
                "*",
                "slot",
                request.slot,
                "token",
                request.token,
                "holder",
                request.instance,
            )
            pipe.xrevrange(keys.claims, count=1)
            entry_id, top = await pipe.execute()
            if entry_id is None:
                return None
            if top and top[0][0] == entry_id:
                return top
            return await client.xrange(keys.claims, entry_id, entry_id)

        found = await self._guarded(keys, add)
        if found is None:
            # NOMKSTREAM: the stream is gone (deleted, or a flush), and a stream XADD created would
            # have Redis' default IDMP settings: configure it again, then claim.
            self._configured.discard(request.job)
            await self._configure(keys)
            found = await self._guarded(keys, add)
            if found is None:
                raise StoreUnavailable(f"Redis stream {keys.claims} vanished twice during a claim")
        if not found:
            return Claim(
                outcome=Outcome.LOST,
                attempt=1,
                reason="the slot was claimed and its entry trimmed from the stream",
            )
        _, _, token, holder = parse_entry(found[0], keys.claims)
        return decided(token == request.token, token, holder)


async def _has_xcfgset(client: aioredis.Redis) -> bool:
    """``COMMAND INFO XCFGSET``: Redis 8.6+ describes it, older servers answer a nil entry (which
    redis-py's reply parser cannot read: a TypeError there means "unknown command")."""
    try:
        found = await client.execute_command("COMMAND", "INFO", "XCFGSET")  # type: ignore[no-untyped-call]
    except TypeError:
        return False
    return bool(found) and "xcfgset" in {str(name).lower() for name in found}
