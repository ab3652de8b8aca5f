"""Servers and stores for the Redis tests.

The machine's Redis 7 is at ``ANARCHON_TEST_REDIS_URL`` (default ``redis://127.0.0.1:6379/0``);
Redis 8.6 (idmp) and Valkey run as private servers on free ports, installed by
``scripts/redis-servers``. Each test works under its own prefix and deletes only its own keys.
"""

from __future__ import annotations

import os
import socket
import uuid
from collections.abc import AsyncIterator, Awaitable, Callable
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import pytest
import redis.asyncio as aioredis

import anarchon
from anarchon import ClaimRequest, ClaimStore, LeaseStore, Overlap, new_token
from anarchon_redis import testing
from anarchon_test_support import mark_services

from .redis_servers import missing_server_reason, private_server_url

REDIS_URL = os.environ.get("ANARCHON_TEST_REDIS_URL", "redis://127.0.0.1:6379/0")


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """Every test here needs a Redis server: ``pytest -m "not services"`` leaves them out."""
    mark_services(items, Path(__file__).parent)


def _answers(url: str) -> bool:
    parts = urlsplit(url)
    try:
        with socket.create_connection((parts.hostname or "127.0.0.1", parts.port or 6379), 1):
            return True
    except OSError:
        return False


def server_url(kind: str) -> str:
    """The URL of a server of `kind` (``redis``: the shared Redis 7; ``redis86``, ``valkey``:
    private servers), or skip the test saying how to get it."""
    if kind == "redis":
        if not _answers(REDIS_URL):
            pytest.skip(
                f"no Redis at {REDIS_URL}: start it (scripts/services) or set "
                "ANARCHON_TEST_REDIS_URL"
            )
        return REDIS_URL
    url = private_server_url(kind)
    if url is None:
        pytest.skip(missing_server_reason(kind))
    return url


class Env:
    """Stores of one test on one server, under a prefix of their own."""

    def __init__(self, url: str) -> None:
        self.url = url
        self.prefix = "t" + uuid.uuid4().hex[:16]
        self.raw = aioredis.Redis.from_url(url, decode_responses=True)
        self._stores: list[ClaimStore] = []

    async def store(self, strategy: str = "lease", **options: Any) -> ClaimStore:
        options.setdefault("prefix", self.prefix)
        store = await anarchon.connect(self.url, strategy=strategy, **options)
        self._stores.append(store)
        return store

    async def lease_store(self, **options: Any) -> LeaseStore:
        store = await self.store("lease", **options)
        assert isinstance(store, LeaseStore)
        return store

    async def now(self) -> int:
        seconds, micros = await self.raw.time()
        return int(seconds) * 1000 + int(micros) // 1000

    async def slot(self) -> int:
        now = await self.now()
        return now - now % 1000

    def request(self, job: str, slot: int, **fields: Any) -> ClaimRequest:
        fields.setdefault("instance", "test:1:aaaa")
        fields.setdefault("token", new_token())
        fields.setdefault("overlap", Overlap.ALLOW)
        return ClaimRequest(job=job, slot=slot, **fields)

    async def close(self) -> None:
        for store in self._stores:
            await store.close()
        await testing.delete_prefix(self.raw, self.prefix)
        await self.raw.aclose()


EnvFactory = Callable[[str], Awaitable[Env]]


@pytest.fixture
async def env_on() -> AsyncIterator[EnvFactory]:
    made: list[Env] = []

    async def make(kind: str) -> Env:
        env = Env(server_url(kind))
        made.append(env)
        return env

    yield make
    for env in made:
        await env.close()


@pytest.fixture
async def env(env_on: EnvFactory) -> Env:
    """The shared Redis 7."""
    return await env_on("redis")
