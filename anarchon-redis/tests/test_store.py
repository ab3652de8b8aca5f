"""Building and opening stores: one factory, one class per strategy, URLs, errors, the README."""

from __future__ import annotations

import asyncio
import re
import subprocess
import sys
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import TYPE_CHECKING
from urllib.parse import urlsplit

import pytest
import redis.asyncio as aioredis

import anarchon
from anarchon import ClaimRequest, ConfigError, LeaseStore, StoreUnavailable, SupportsClaimMany
from anarchon.backend import StoreURL, structure_options
from anarchon_redis import (
    STRATEGIES,
    IdmpStore,
    RedisLeaseStore,
    RedisOptions,
    RedisStore,
    ScriptStore,
    StreamIdStore,
    testing,
)

from .redis_servers import find_binary, missing_server_reason, start

if TYPE_CHECKING:
    from conftest import Env

README = Path(__file__).resolve().parents[1] / "README.md"


@pytest.mark.parametrize(
    ("query", "cls", "lease", "batch"),
    [
        ("", RedisLeaseStore, True, True),
        ("?strategy=lease", RedisLeaseStore, True, True),
        ("?strategy=stream-id", StreamIdStore, False, True),
        ("?strategy=idmp&duration_sec=60", IdmpStore, False, True),
        ("?strategy=script&window_ms=2m", ScriptStore, False, True),
    ],
)
def test_one_factory_builds_the_class_of_the_strategy(
    query: str, cls: type, lease: bool, batch: bool
) -> None:
    store = anarchon.create_store("redis://u:secret@127.0.0.1:6379/0" + query)
    assert type(store) is cls and isinstance(store, RedisStore)
    assert isinstance(store, LeaseStore) is lease
    assert isinstance(store, SupportsClaimMany) is batch is store.capabilities.batch
    assert store.capabilities.leases is lease and store.capabilities.self_recognition
    assert "secret" not in repr(store) and "***" in repr(store)


@pytest.mark.parametrize("strategy", STRATEGIES)
def test_each_store_class_serves_only_its_own_strategy(strategy: str) -> None:
    """`from_url` picks the class; building a class directly with another strategy's options is
    refused, so a lease strategy never hides in a store the runtime would not heartbeat."""
    url = StoreURL.parse("redis://127.0.0.1:6379/0")
    options = structure_options(RedisOptions, {"strategy": strategy}, where="redis://")
    store = RedisStore.from_url(url, options)
    assert store.strategy_name == strategy and store.capabilities.leases is (strategy == "lease")
    for cls in (RedisStore, RedisLeaseStore, StreamIdStore, IdmpStore, ScriptStore):
        if cls is not type(store):
            with pytest.raises(ConfigError, match=f"the options say strategy={strategy}"):
                cls(url, options)
            if cls is not RedisStore:
                with pytest.raises(ConfigError, match=f"cannot be strategy={strategy}"):
                    cls.from_url(url, options)
    assert type(type(store).from_url(url, options)) is type(store)


def test_remembers_ms_follows_the_options() -> None:
    def remembers(query: str) -> int | None:
        return anarchon.create_store("redis://127.0.0.1/0" + query).capabilities.remembers_ms

    assert remembers("") is None
    assert remembers("?strategy=stream-id&maxlen=10") is None
    assert remembers("?strategy=idmp") == 600_000
    assert remembers("?strategy=idmp&duration_sec=90") == 90_000
    assert remembers("?strategy=script") == 600_000
    assert remembers("?strategy=script&window_ms=1500ms") == 1500


def test_rediss_is_accepted_and_bad_paths_are_not() -> None:
    assert isinstance(anarchon.create_store("rediss://127.0.0.1:6380/1"), RedisLeaseStore)
    with pytest.raises(ConfigError, match="database number"):
        anarchon.create_store("redis://127.0.0.1/zero")


async def test_unreachable_server_is_store_unavailable_without_password() -> None:
    with pytest.raises(StoreUnavailable, match=r"did not answer") as info:
        await anarchon.connect("redis://u:hunter2@127.0.0.1:1/0?timeout_ms=200")
    assert "hunter2" not in str(info.value)


@asynccontextmanager
async def tcp_server(
    upstream: str | None = None, answer: bytes = b"HTTP/1.1 400 Bad Request\r\n\r\n"
) -> AsyncIterator[tuple[int, list[bool]]]:
    """A TCP server on a free port: it sends `answer` (HTTP by default) for what it reads, or with
    `upstream` passes bytes to and from that Redis, sending `answer` instead of Redis's replies
    while the flag it yields is set. Yields (port, [flag])."""
    garbage = [upstream is None]
    target = urlsplit(upstream) if upstream else None

    async def pipe(
        reader: asyncio.StreamReader, writer: asyncio.StreamWriter, replies: bool
    ) -> None:
        while data := await reader.read(65536):
            writer.write(answer if replies and garbage[0] else data)
            await writer.drain()

    handlers: set[asyncio.Task[None]] = set()
    writers: list[asyncio.StreamWriter] = []

    async def serve(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        handlers.add(asyncio.current_task())  # type: ignore[arg-type]
        writers.append(writer)
        try:
            if target is None:
                await pipe(reader, writer, True)
                return
            up_reader, up_writer = await asyncio.open_connection(target.hostname, target.port)
            writers.append(up_writer)
            # requests reach Redis unchanged: only what it answers is replaced
            await asyncio.gather(pipe(reader, up_writer, False), pipe(up_reader, writer, True))
        except (ConnectionError, OSError):
            pass

    server = await asyncio.start_server(serve, "127.0.0.1", 0)
    try:
        yield server.sockets[0].getsockname()[1], garbage
    finally:
        # Every connection is closed and waited for here, so none is left to the garbage
        # collector (an unclosed StreamWriter warns in whichever test runs next).
        server.close()
        for task in handlers:
            task.cancel()
        await asyncio.gather(*handlers, return_exceptions=True)
        for writer in writers:
            writer.close()
        await asyncio.gather(*(w.wait_closed() for w in writers), return_exceptions=True)
        await server.wait_closed()


async def test_a_server_that_is_not_redis_is_named_without_the_password() -> None:
    async with tcp_server() as (port, _):
        with pytest.raises(StoreUnavailable, match="not the Redis protocol") as info:
            await anarchon.connect(f"redis://u:hunter2@127.0.0.1:{port}/0?timeout_ms=500")
    assert "hunter2" not in str(info.value)
    assert "rediss://" in str(info.value)  # how to fix it, if the port is a TLS one


@pytest.mark.parametrize("strategy", ["lease", "stream-id", "script"])
async def test_garbage_mid_run_is_store_unavailable_and_loses_nothing(
    env: Env, strategy: str
) -> None:
    async with tcp_server(upstream=env.url) as (port, garbage):
        url = f"redis://127.0.0.1:{port}/0?timeout_ms=1000"
        store = await anarchon.connect(url, strategy=strategy, prefix=env.prefix)
        try:
            request = env.request("j", await env.slot())
            garbage[0] = True
            with pytest.raises(StoreUnavailable, match="not the Redis protocol"):
                await store.claim(request)
            garbage[0] = False
            claim = await store.claim(request)  # Redis decided it: the resend is recognised (C2)
            assert claim.won, claim
            other = await store.claim(env.request("j", request.slot, instance="test:2:bbbb"))
            assert not other.won, other
        finally:
            await store.close()


async def test_credentials_refused_are_named_at_once_without_the_password(env: Env) -> None:
    """A user the shared Redis does not know is refused (WRONGPASS). No retry can change that,
    so it is said at once, not as "did not answer after 3 tries"."""
    url = env.url.replace("redis://", "redis://nobody:hunter2@", 1)
    with pytest.raises(ConfigError, match="refused the URL's user and password") as info:
        await anarchon.connect(url)
    assert "hunter2" not in str(info.value) and "did not answer" not in str(info.value)


async def test_a_server_that_asks_for_a_password_says_so() -> None:
    async with tcp_server(answer=b"-NOAUTH Authentication required.\r\n") as (port, _):
        with pytest.raises(ConfigError, match="asks for a password and the URL gives none"):
            await anarchon.connect(f"redis://127.0.0.1:{port}/0?timeout_ms=500")


@pytest.mark.parametrize("strategy", ["lease", "stream-id", "script"])
async def test_a_read_only_replica_is_store_unavailable_naming_the_primary(strategy: str) -> None:
    """A URL that points at a replica (an old primary after a failover) fails at open (loading
    the claim function is a write) or at the first claim, as `StoreUnavailable`, not as
    redis-py's ReadOnlyError."""
    binary = find_binary("redis")
    if binary is None:
        pytest.skip("redis-server is not installed (or set ANARCHON_TEST_REDIS_SERVER)")
    server = start(binary)
    raw = aioredis.Redis.from_url(server.url, decode_responses=True)
    try:
        await raw.replicaof("127.0.0.1", "1")  # a replica of nothing is read-only all the same
        with pytest.raises(StoreUnavailable, match="read-only replica: point the URL at the"):
            store = await anarchon.connect(server.url, strategy=strategy)
            try:
                await store.claim(ClaimRequest(job="j", slot=await store.now_ms(), instance="me"))
            finally:
                # the store let go of the replica: its next command connects anew, which
                # reaches the new primary where the URL's name has moved to it
                clients = await raw.client_list()
                assert not [c for c in clients if c.get("name") == "anarchon"], clients
                await store.close()
    finally:
        await raw.aclose()
        server.stop()


async def test_store_must_be_open(env: Env) -> None:
    store = RedisStore.create(env.url, prefix=env.prefix)
    with pytest.raises(RuntimeError, match="not open"):
        await store.now_ms()
    await store.open()
    await store.open()  # idempotent
    await store.close()
    await store.close()


def test_readme_example_runs(env: Env) -> None:
    blocks = re.findall(r"```python\n(.*?)```", README.read_text(), re.DOTALL)
    assert blocks
    code = blocks[0].replace("redis://127.0.0.1:6379/0", env.url).replace("readme", env.prefix)
    result = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, timeout=60, check=False
    )
    assert result.returncode == 0, result.stderr
    assert result.stdout.strip() == "won"


def test_private_server_binaries_are_found_or_explained() -> None:
    for kind in ("redis86", "valkey"):
        assert "scripts/redis-servers" in missing_server_reason(kind)


async def test_env_cleanup_deletes_only_its_prefix(env: Env) -> None:
    store = await env.store("script")
    await store.claim(env.request("job", await env.slot()))
    other = aioredis.Redis.from_url(env.url, decode_responses=True)
    try:
        await other.set("{unrelated:job}:x", "keep")
        assert await testing.delete_prefix(other, env.prefix) == 1
        assert await other.get("{unrelated:job}:x") == "keep"
    finally:
        await other.delete("{unrelated:job}:x")
        await other.aclose()
