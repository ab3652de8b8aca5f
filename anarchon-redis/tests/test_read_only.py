"""The job list (`SupportsJobList`) and the read-only open (`SupportsReadOnly`, rule R1) of every
strategy: jobs() lists the jobs that have runs; a read-only open loads nothing and writes
nothing, refuses a prefix with no keys of its strategy (saying where it looked), and works for
a user restricted to the monitoring ACL the docs show (docs/backends/redis.md, "Read-only
monitoring"), through ``anarchon history`` and ``anarchon status``."""

from __future__ import annotations

import asyncio
import json
import re
import sys
import uuid
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import TYPE_CHECKING, Any
from urllib.parse import urlsplit

import pytest
import redis.asyncio as aioredis

import anarchon
from anarchon import (
    LeaseStore,
    RunStatus,
    StoreNotSetUp,
    SupportsJobList,
    SupportsJobSetup,
    SupportsPause,
    SupportsReadOnly,
    SupportsTrigger,
)
from anarchon_redis import testing

if TYPE_CHECKING:
    from conftest import Env, EnvFactory

DOCS = Path(__file__).parents[2] / "docs" / "backends" / "redis.md"

STRATEGIES = [
    pytest.param("redis", "lease", id="redis-lease"),
    pytest.param("redis", "stream-id", id="redis-stream-id"),
    pytest.param("redis", "script", id="redis-script"),
    pytest.param("redis86", "idmp", id="redis86-idmp"),
]


def monitoring_acl() -> list[str]:
    """The rules of the ``ACL SETUSER monitor`` the docs show, after its key pattern."""
    text = DOCS.read_text(encoding="utf-8")
    block = text.split("ACL SETUSER monitor", 1)[1].split("```", 1)[0]
    return re.findall(r"(?<!\S)[+-]@?[a-z|]+", block)


async def keyspace(url: str, prefix: str) -> dict[str, tuple[str, int, bytes | None]]:
    """Every key under `prefix`: its type, TTL and DUMP (the value, byte for byte)."""
    raw = aioredis.Redis.from_url(url)
    try:
        found: dict[str, tuple[str, int, bytes | None]] = {}
        async for key in raw.scan_iter(match=f"{{{prefix}:*", count=1000):
            kind: Any = await raw.type(key)
            found[key.decode()] = (kind.decode(), await raw.pttl(key), await raw.dump(key))
        return found
    finally:
        await raw.aclose()


async def claims_and_finishes(env: Env, strategy: str, jobs: list[str]) -> int:
    """Each job wins a slot (lease: and finishes it, the first job's failed); the slot."""
    store = await env.store(strategy)
    slot = await env.slot()
    if isinstance(store, SupportsJobSetup):
        await store.setup_jobs(jobs)
    for i, job in enumerate(jobs):
        claim = await store.claim(env.request(job, slot))
        assert claim.won
        if isinstance(store, LeaseStore):
            status, error = (
                (RunStatus.FAILED, "ValueError: boom") if i == 0 else (RunStatus.SUCCEEDED, None)
            )
            assert await store.finish(job, slot, claim.token or "", status, error)
    return slot


@pytest.mark.parametrize(("server", "strategy"), STRATEGIES)
async def test_jobs_lists_the_jobs_with_runs(
    env_on: EnvFactory, server: str, strategy: str
) -> None:
    env = await env_on(server)
    store = await env.store(strategy)
    assert isinstance(store, SupportsJobList)
    assert await store.jobs() == []
    slot = await env.slot()
    for job in ("b-2", "a_1", "C"):
        assert (await store.claim(env.request(job, slot))).won
    if isinstance(store, SupportsJobSetup):  # idmp: a set-up job's stream holds no claim yet
        await store.setup_jobs(["ready"])
        assert await env.raw.exists(store.keys("ready").claims)  # type: ignore[attr-defined]
    # Keys under the prefix that are not a job's are left out; so are other prefixes' jobs.
    await env.raw.set(f"{{{env.prefix}:x}}:other", "1")
    await env.raw.set(f"{{{env.prefix}:x:y}}:runs", "1")
    await env.raw.set(f"{{{env.prefix}:x:y}}:claims", "1")
    other = await env.store(strategy, prefix=env.prefix + "-2")
    try:
        assert await store.jobs() == ["C", "a_1", "b-2"]
        assert await other.jobs() == []  # type: ignore[attr-defined]
    finally:
        await testing.delete_prefix(env.raw, env.prefix + "-2")


@asynccontextmanager
async def read_only(env: Env, strategy: str, **options: Any) -> AsyncIterator[Any]:
    options.setdefault("prefix", env.prefix)
    async with anarchon.connect(env.url, read_only=True, strategy=strategy, **options) as store:
        assert isinstance(store, SupportsReadOnly)
        yield store


@pytest.mark.parametrize(("server", "strategy"), STRATEGIES)
async def test_R1_read_only_open_reads_and_writes_nothing(
    env_on: EnvFactory, server: str, strategy: str
) -> None:
    env = await env_on(server)
    slot = await claims_and_finishes(env, strategy, ["one", "two"])
    before = await keyspace(env.url, env.prefix)
    async with read_only(env, strategy) as store:
        assert await store.jobs() == ["one", "two"]
        runs = await store.history("one")
        assert [r.slot for r in runs] == [slot]
        assert abs(await store.now_ms() - await env.now()) < 5000
        with pytest.raises(RuntimeError, match="opened read-only"):
            await store.claim(env.request("one", slot))
        with pytest.raises(RuntimeError, match="opened read-only"):
            await store.claim_many([env.request("three", slot)])
        if isinstance(store, LeaseStore):
            with pytest.raises(RuntimeError, match="opened read-only"):
                await store.finish("one", slot, runs[0].token, RunStatus.SUCCEEDED)
    assert await keyspace(env.url, env.prefix) == before


async def test_an_open_after_a_read_only_open_makes_the_store_writable(env: Env) -> None:
    await claims_and_finishes(env, "lease", ["job"])
    async with read_only(env, "lease") as store:
        await store.open()
        assert (await store.claim(env.request("job", await env.slot() + 1000))).won


@pytest.mark.parametrize("strategy", ["lease", "script"])
async def test_R1_read_only_open_of_an_unused_prefix_says_where_it_looked(
    env: Env, strategy: str
) -> None:
    with pytest.raises(StoreNotSetUp) as caught:
        async with read_only(env, strategy):
            pass
    message = str(caught.value)
    assert f"prefix {env.prefix!r}" in message
    assert "database 0" in message
    assert "no scheduler has claimed" in message
    assert await keyspace(env.url, env.prefix) == {}


async def test_read_only_open_with_another_strategy_names_the_one_that_wrote(env: Env) -> None:
    await claims_and_finishes(env, "lease", ["job"])
    with pytest.raises(StoreNotSetUp, match=r"has keys of strategy=lease \(such as \{t"):
        async with read_only(env, "script"):
            pass
    await claims_and_finishes(env, "stream-id", ["job"])  # both under one prefix: each opens
    async with read_only(env, "script") as store:
        assert await store.jobs() == ["job"]
    async with read_only(env, "lease") as store:
        assert await store.jobs() == ["job"]


async def cli(*args: str) -> tuple[int, str, str]:
    process = await asyncio.create_subprocess_exec(
        sys.executable,
        "-m",
        "anarchon.cli",
        *args,
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.PIPE,
    )
    out, err = await asyncio.wait_for(process.communicate(), 120)
    assert process.returncode is not None
    return process.returncode, out.decode(), err.decode()


@pytest.mark.processes
@pytest.mark.parametrize(("server", "strategy"), STRATEGIES)
async def test_R1_history_and_status_as_a_read_only_acl_user(
    env_on: EnvFactory, server: str, strategy: str
) -> None:
    """The docs' monitoring user (reads only, on the prefix's keys) runs ``anarchon history``
    and ``anarchon status``: they show the runs, never print the password, and every key under
    the prefix is byte for byte the same afterwards; where the strategy pauses and triggers, it
    reads the pauses and triggers too. On an unused prefix they say where they looked."""
    env = await env_on(server)
    slot = await claims_and_finishes(env, strategy, ["one", "two"])
    writer = await env.store(strategy)
    control: list[Any] = []
    if isinstance(writer, SupportsPause) and isinstance(writer, SupportsTrigger):
        control = [await writer.pause("two", reason="freeze"), await writer.trigger("one")]
    before = await keyspace(env.url, env.prefix)
    user, password = "monitor-" + uuid.uuid4().hex[:8], uuid.uuid4().hex
    rules = monitoring_acl()
    assert "-@all" in rules and "+@read" in rules and not any("write" in r for r in rules[1:])
    await env.raw.execute_command(
        "ACL", "SETUSER", user, "on", f">{password}", "resetkeys", f"~{{{env.prefix}:*", *rules
    )
    try:
        parts = urlsplit(env.url)
        url = (
            f"redis://{user}:{password}@{parts.hostname}:{parts.port}/0"
            f"?strategy={strategy}&prefix={env.prefix}"
        )
        code, out, err = await cli("history", url, "one", "--json")
        assert code == 0, err
        assert password not in out + err
        rows = json.loads(out)
        assert [r["slot_ms"] for r in rows] == [slot]
        status = "failed" if strategy == "lease" else "claimed"
        assert rows[0]["status"] == status

        code, out, err = await cli("status", url, "--once", "--json")
        assert code == 0, err
        assert password not in out + err
        shown = json.loads(out)
        assert [job["job"] for job in shown["jobs"]] == ["one", "two"]
        assert [job["latest"][0]["slot_ms"] for job in shown["jobs"]] == [slot, slot]
        assert await keyspace(env.url, env.prefix) == before

        async with anarchon.connect(url, read_only=True) as store:
            if control:
                assert await store.pauses() == control[:1]
                assert await store.triggers(0) == control[1:]
            else:
                assert not isinstance(store, SupportsPause | SupportsTrigger)
        assert await keyspace(env.url, env.prefix) == before

        unused = url.replace(f"prefix={env.prefix}", f"prefix={env.prefix}-unused")
        code, out, err = await cli("status", unused, "--once")
        assert code != 0
        assert password not in out + err
        assert f"{env.prefix}-unused" in out + err and "database 0" in out + err
    finally:
        await env.raw.execute_command("ACL", "DELUSER", user)
    assert await keyspace(env.url, env.prefix) == before
