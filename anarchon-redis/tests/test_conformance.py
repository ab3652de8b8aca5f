"""Certify every Redis strategy with the conformance kit, exactly as a third-party backend would:
one harness per strategy, backdoors on a raw redis-py client (`anarchon_redis.testing`).

lease, stream-id and script run on the machine's Redis 7 (``ANARCHON_TEST_REDIS_URL``); idmp on
a private Redis 8.6, and script and stream-id once more on a private Valkey
(``scripts/redis-servers`` installs both).
"""

from __future__ import annotations

import os
from typing import Any, ClassVar
from urllib.parse import urlsplit

import pytest
import redis.asyncio as aioredis

import anarchon
from anarchon import Capabilities, ClaimStore, RunRecord
from anarchon_conformance import DEFAULT_PREFIX, BackendHarness, ConformanceSuite
from anarchon_redis import RedisStore, testing

from .redis_servers import missing_server_reason, private_server_url

REDIS_URL = os.environ.get("ANARCHON_TEST_REDIS_URL", "redis://127.0.0.1:6379/0")


class RedisHarness(BackendHarness):
    """One strategy on one server. The kit's prefixes get this harness's run id appended, so
    tests never share keys on the shared server; cleanup deletes exactly those keys."""

    strategy: ClassVar[str] = "lease"
    server: ClassVar[str] = "redis"
    options: ClassVar[dict[str, Any]] = {}

    async def setup(self) -> None:
        if self.server == "redis":
            self.base = self.given_url or REDIS_URL
        else:
            url = private_server_url(self.server)
            if url is None:
                pytest.skip(missing_server_reason(self.server))
            self.base = url
        self.raw = aioredis.Redis.from_url(self.base, decode_responses=True)
        try:
            await self.raw.ping()
        except OSError as exc:
            await self.raw.aclose()
            pytest.skip(f"no Redis at {self.base} ({exc}): start it with scripts/services")
        self.used = {DEFAULT_PREFIX + "-" + self.run_id}

    async def cleanup(self) -> None:
        await super().cleanup()
        # The kit's process check claims under its `process_prefix`, in other OS processes.
        for prefix in {*self.used, self.process_prefix}:
            await testing.delete_prefix(self.raw, prefix)
        await self.raw.aclose()

    @property
    def name(self) -> str:  # type: ignore[override]
        return f"redis-{self.strategy}"

    def mine(self, prefix: str) -> str:
        mapped = f"{prefix}-{self.run_id}"
        self.used.add(mapped)
        return mapped

    def url(self, address: tuple[str, int] | None = None) -> str:
        parts = urlsplit(self.base)
        host, port = address or (parts.hostname or "127.0.0.1", parts.port or 6379)
        options = "&".join(
            f"{k}={v}" for k, v in {"strategy": self.strategy, **self.options}.items()
        )
        return f"redis://{host}:{port}{parts.path or '/0'}?{options}"

    def address(self) -> tuple[str, int] | None:
        parts = urlsplit(self.base)
        return parts.hostname or "127.0.0.1", parts.port or 6379

    async def open_store(
        self,
        *,
        prefix: str = DEFAULT_PREFIX,
        address: tuple[str, int] | None = None,
        **options: Any,
    ) -> ClaimStore:
        store = await anarchon.connect(self.url(address), prefix=self.mine(prefix), **options)
        self._stores.append(store)
        return store

    @property
    def capabilities(self) -> Capabilities:
        return RedisStore.create(self.url()).capabilities

    async def server_version(self) -> str:
        info = await self.raw.info("server")
        if "valkey_version" in info:
            return f"Valkey {info['valkey_version']}"
        return f"Redis {info['redis_version']}"

    async def force_expire(self, job: str, slot: int, *, prefix: str = DEFAULT_PREFIX) -> None:
        await testing.force_expire(self.raw, self.mine(prefix), job, slot)

    async def raw_run(
        self, job: str, slot: int, *, prefix: str = DEFAULT_PREFIX
    ) -> RunRecord | None:
        if self.strategy == "lease":
            return await testing.raw_run(self.raw, self.mine(prefix), job, slot)
        return await testing.raw_claim(self.raw, self.mine(prefix), job, slot)


class LeaseHarness(RedisHarness):
    strategy = "lease"


class StreamIdHarness(RedisHarness):
    strategy = "stream-id"
    # A slot below the stream's top is `late` (DESIGN 4): the kit claims a job's slots in order.
    claims_in_slot_order = True


class ScriptHarness(RedisHarness):
    strategy = "script"


class IdmpHarness(RedisHarness):
    strategy = "idmp"
    server = "redis86"


class ValkeyScriptHarness(RedisHarness):
    strategy = "script"
    server = "valkey"


class ValkeyStreamIdHarness(RedisHarness):
    strategy = "stream-id"
    server = "valkey"
    claims_in_slot_order = True


class TestRedisLeaseConformance(ConformanceSuite):
    harness_class = LeaseHarness


class TestRedisStreamIdConformance(ConformanceSuite):
    harness_class = StreamIdHarness


class TestRedisScriptConformance(ConformanceSuite):
    harness_class = ScriptHarness


class TestRedisIdmpConformance(ConformanceSuite):
    harness_class = IdmpHarness


class TestValkeyScriptConformance(ConformanceSuite):
    harness_class = ValkeyScriptHarness


class TestValkeyStreamIdConformance(ConformanceSuite):
    harness_class = ValkeyStreamIdHarness
