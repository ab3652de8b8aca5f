"""Durability options and a server that forgets (issue #24, item 1).

``wait_replicas`` / ``wait_timeout`` / ``wait_aof``: a claim is ``won`` only once a replica (or
the AOF) holds it; a replica that does not acknowledge in time (here: stopped with SIGSTOP)
turns ``won`` into ``unknown`` (C3), and the resend with the same token (C2) answers ``won``
once it does. Persistence is read at open (warning, or `ConfigError` with
``require_persistence``); a restarted server (its run id changed) is logged once, counted and
shown in ``notices``.
"""

from __future__ import annotations

import asyncio
import logging
import shutil
import subprocess
import tempfile
import time
from collections.abc import AsyncIterator, Iterator
from typing import Any

import pytest
import redis.asyncio as aioredis

import anarchon
from anarchon import ClaimRequest, ConfigError, LeaseStore, Outcome, RunStatus, new_token
from anarchon.backend import StoreUnavailable
from anarchon_redis import RedisStore
from anarchon_test_support.waiting import eventually

from .redis_servers import _answers, _free_port, find_binary, start
from .replication import Pair, start_pair

STRATEGIES = ["lease", "stream-id", "script"]
WAIT = {"wait_replicas": 1, "wait_timeout": "1s"}
"""A replica on a busy 2-core machine may take a few hundred ms to ack: 200 ms made a healthy
replica look absent (claims answered unknown) while another test run loaded the machine."""


@pytest.mark.parametrize(
    ("options", "says"),
    [
        ({"wait_replicas": 0}, "wait_replicas must be from 1 to 100"),
        ({"wait_replicas": 101}, "wait_replicas must be from 1 to 100"),
        ({"wait_timeout": "100ms"}, "wait_timeout applies only with wait_replicas"),
        ({"wait_replicas": 1, "wait_timeout": 0}, "duration"),
        ({"wait_replicas": 1, "wait_timeout": "2m"}, "wait_timeout must be from 1 to 60000"),
        (
            {"wait_replicas": 1, "wait_timeout": "5s", "timeout_ms": "5s"},
            "must be shorter than timeout_ms",
        ),
        ({"restart_check_ms": 10}, "restart_check_ms must be from 100"),
    ],
)
def test_options_are_checked(options: dict[str, Any], says: str) -> None:
    with pytest.raises(ConfigError, match=says):
        RedisStore.create("redis://127.0.0.1:6379/0", **options)


def test_options_from_the_url() -> None:
    store = RedisStore.create(
        "redis://127.0.0.1:6379/0?wait_replicas=2&wait_timeout=250ms&require_persistence=true"
    )
    assert store.options.wait_replicas == 2
    assert store.options.confirm_timeout_ms == 250
    assert store.options.require_persistence
    assert "WAIT 2, 250 ms" in repr(store.link.confirm)


def _version(binary: str) -> str:
    return subprocess.run([binary, "--version"], check=True, capture_output=True, text=True).stdout


@pytest.fixture(scope="module")
def pair() -> Iterator[Pair]:
    made = start_pair()
    if made is None:
        pytest.skip("redis-server is not installed")
    yield made
    made.stop()


@pytest.fixture
def replica_resumed(pair: Pair) -> Iterator[Pair]:
    """The pair, with the replica running again after the test whatever happens."""
    yield pair
    pair.resume_replica()


async def _open(url: str, strategy: str, **options: Any) -> anarchon.ClaimStore:
    options.setdefault("prefix", "d" + new_token()[:12])
    return await anarchon.connect(url, strategy=strategy, **options)


async def _slot(store: anarchon.ClaimStore) -> int:
    now = await store.now_ms()
    assert now is not None
    return now - now % 1000


def _request(job: str, slot: int, **fields: Any) -> ClaimRequest:
    fields.setdefault("instance", "test:1:aaaa")
    return ClaimRequest(job=job, slot=slot, max_late_ms=600_000, **fields)


@pytest.mark.parametrize("strategy", STRATEGIES)
async def test_won_only_once_the_replica_holds_it(pair: Pair, strategy: str) -> None:
    store = await _open(pair.primary.url, strategy, **WAIT)
    replica = aioredis.Redis.from_url(pair.replica.url, decode_responses=True)
    try:
        assert isinstance(store, RedisStore)
        slot = await _slot(store)
        claim = await store.claim(_request("nightly", slot))
        assert claim.outcome is Outcome.WON
        keys = store.keys("nightly")
        key = keys.runs if strategy == "lease" else keys.claims
        # WAIT returned 1: the replica has the write already, no waiting here.
        assert await replica.exists(key) == 1
    finally:
        await store.close()
        await replica.aclose()


@pytest.mark.parametrize("strategy", STRATEGIES)
async def test_unconfirmed_won_is_unknown_and_the_resend_wins(
    replica_resumed: Pair, strategy: str
) -> None:
    pair = replica_resumed
    store = await _open(pair.primary.url, strategy, **WAIT)
    other = await _open(pair.primary.url, strategy, prefix=store.options.prefix, **WAIT)  # type: ignore[attr-defined]
    try:
        slot = await _slot(store)
        mine = _request("nightly", slot)
        # A confirmed write on the other store's connection: its WAIT has nothing older to
        # wait for when the replica stops acknowledging.
        assert (await other.claim(_request("warmup", slot))).won
        pair.pause_replica()
        first = await store.claim(mine)
        assert first.outcome is Outcome.UNKNOWN, first
        assert first.reason.startswith("unconfirmed: 0 of 1 replica(s)")
        assert "1 write(s) not confirmed" in store.notices[0]  # type: ignore[attr-defined]
        # The resend from other connections (another store) while the replica still lags: the
        # ack write makes its WAIT cover the claim, though the resend itself writes nothing.
        assert (await other.claim(mine)).outcome is Outcome.UNKNOWN
        # Another instance does not win the slot the primary holds for us.
        theirs = await other.claim(_request("nightly", slot, instance="test:2:bbbb"))
        assert not theirs.won
        pair.resume_replica()
        again = await store.claim(mine)  # C2: the same token
        assert again.outcome is Outcome.WON, again
        assert again.token == mine.token
        batch = await store.claim_many([mine, _request("hourly", slot)])  # type: ignore[attr-defined]
        assert [c.outcome for c in batch] == [Outcome.WON, Outcome.WON]
        pair.pause_replica()
        unconfirmed = await store.claim_many([_request("weekly", slot)])  # type: ignore[attr-defined]
        assert [c.outcome for c in unconfirmed] == [Outcome.UNKNOWN]
    finally:
        pair.resume_replica()
        await store.close()
        await other.close()


async def test_renew_finish_release_wait_for_the_replica(replica_resumed: Pair) -> None:
    pair = replica_resumed
    store = await _open(pair.primary.url, "lease", **WAIT)
    try:
        assert isinstance(store, LeaseStore)
        slot = await _slot(store)
        mine = _request("nightly", slot, lease_ms=60_000)
        assert (await store.claim(mine)).won
        pair.pause_replica()
        with pytest.raises(StoreUnavailable, match="renew not confirmed"):
            await store.renew("nightly", slot, mine.token, 60_000)
        with pytest.raises(StoreUnavailable, match="finish not confirmed"):
            await store.finish("nightly", slot, mine.token, RunStatus.SUCCEEDED)
        pair.resume_replica()
        # C2 for finish: the resend is recognised and now confirmed.
        assert await store.finish("nightly", slot, mine.token, RunStatus.SUCCEEDED)
        # A refusal (not the holder) wrote nothing and answers False, not an error.
        pair.pause_replica()
        assert not await store.release("nightly", slot, new_token())
    finally:
        pair.resume_replica()
        await store.close()


async def test_too_few_replicas_is_a_warning(pair: Pair, caplog: pytest.LogCaptureFixture) -> None:
    with caplog.at_level(logging.WARNING, logger="anarchon.store"):
        store = await _open(pair.primary.url, "lease", wait_replicas=2, wait_timeout="50ms")
    try:
        assert "1 replica(s) connected and wait_replicas=2" in caplog.text
        slot = await _slot(store)
        assert (await store.claim(_request("nightly", slot))).outcome is Outcome.UNKNOWN
    finally:
        await store.close()


async def test_wait_aof_needs_waitaof() -> None:
    binary = find_binary("redis")
    if binary is None:
        pytest.skip("redis-server is not installed")
    version = _version(binary)
    if " v=7.0" not in version and " v=6." not in version:
        pytest.skip(f"this redis-server has WAITAOF ({version.strip()})")
    server = start(binary)
    try:
        with pytest.raises(ConfigError, match="has no WAITAOF"):
            await _open(server.url, "lease", wait_aof=True)
    finally:
        server.stop()


async def test_wait_aof_on_valkey() -> None:
    binary = find_binary("valkey")
    if binary is None:
        pytest.skip("valkey server not installed: run scripts/redis-servers")
    server = start(binary)
    try:
        with pytest.raises(ConfigError, match="appendonly no: wait_aof=true needs appendonly"):
            await _open(server.url, "lease", wait_aof=True)
        raw = aioredis.Redis.from_url(server.url)
        await raw.config_set("appendonly", "yes")
        await raw.aclose()
        store = await _open(server.url, "lease", wait_aof=True, wait_timeout="1s")
        try:
            slot = await _slot(store)
            assert (await store.claim(_request("nightly", slot))).won
        finally:
            await store.close()
    finally:
        server.stop()


@pytest.fixture
def bare() -> Iterator[str]:
    """A private server without persistence."""
    binary = find_binary("redis")
    if binary is None:
        pytest.skip("redis-server is not installed")
    server = start(binary)
    yield server.url
    server.stop()


async def test_a_server_without_persistence_is_named(
    bare: str, caplog: pytest.LogCaptureFixture
) -> None:
    with caplog.at_level(logging.WARNING, logger="anarchon.store"):
        store = await _open(bare, "lease")
    await store.close()
    assert "has no persistence (appendonly=no, save='')" in caplog.text
    with pytest.raises(ConfigError, match="require_persistence=true refuses"):
        await _open(bare, "lease", require_persistence=True)
    raw = aioredis.Redis.from_url(bare)
    await raw.config_set("appendonly", "yes")
    caplog.clear()
    with caplog.at_level(logging.WARNING, logger="anarchon.store"):
        store = await _open(bare, "lease", require_persistence=True)
    await store.close()
    assert "persistence" not in caplog.text
    # A user who may not run CONFIG: INFO persistence tells AOF, not the RDB schedule.
    await raw.execute_command("ACL", "SETUSER", "app", "on", ">pw", "~*", "&*", "+@all", "-config")
    await raw.aclose()
    user_url = bare.replace("redis://", "redis://app:pw@")
    store = await _open(user_url, "lease", require_persistence=True)  # AOF on: safe
    await store.close()
    raw = aioredis.Redis.from_url(bare)
    await raw.config_set("appendonly", "no")
    await raw.aclose()
    with pytest.raises(ConfigError, match=r"could not tell .* CONFIG GET refused"):
        await _open(user_url, "lease", require_persistence=True)


class Restartable:
    """A redis-server without persistence that the test stops and starts on the same port."""

    def __init__(self, binary: str) -> None:
        self.port = _free_port()
        self.directory = tempfile.mkdtemp(prefix="anarchon-redis-forgets-")
        self.args = [binary, "--port", str(self.port), "--bind", "127.0.0.1", "--save", ""]
        self.args += ["--appendonly", "no", "--dir", self.directory]
        self.process: subprocess.Popen[bytes] | None = None

    @property
    def url(self) -> str:
        return f"redis://127.0.0.1:{self.port}/0"

    def spawn(self) -> None:
        self.process = subprocess.Popen(
            self.args, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL
        )

    async def start(self) -> None:
        self.spawn()
        await eventually(lambda: _answers(self.port), 10, "redis-server to answer")

    def stop(self) -> None:
        if self.process is not None and self.process.poll() is None:
            self.process.terminate()
            self.process.wait(10)


@pytest.fixture
async def restartable() -> AsyncIterator[Restartable]:
    binary = find_binary("redis")
    if binary is None:
        pytest.skip("redis-server is not installed")
    server = Restartable(binary)
    await server.start()
    yield server
    server.stop()
    shutil.rmtree(server.directory, ignore_errors=True)


class Errors:
    def __init__(self) -> None:
        self.seen: list[tuple[str, BaseException]] = []

    @anarchon.hookimpl
    def anarchon_store_error(self, store: str, operation: str, error: BaseException) -> None:
        self.seen.append((operation, error))


async def test_a_restart_that_forgets_is_noticed(
    restartable: Restartable, caplog: pytest.LogCaptureFixture
) -> None:
    """The chaos of issue #24: a persistence-off Redis restarted mid-race forgets the runs, and a
    second instance wins the same slot. The store cannot prevent that (only persistence can),
    but it says so: once in the logs, in `notices` (health) and to observers (metrics)."""
    errors = Errors()
    manager = anarchon.plugins.plugin_manager()
    manager.register(errors)
    store = await _open(restartable.url, "lease", restart_check_ms=100)
    try:
        slot = await _slot(store)
        assert (await store.claim(_request("nightly", slot))).won
        restartable.stop()
        await restartable.start()
        answers: list[Any] = []

        async def claimed() -> bool:
            try:
                answers.append(await store.claim(_request("nightly", slot, instance="t:2:bb")))
            except StoreUnavailable:
                return False
            return True

        for _ in range(200):
            if await claimed():
                break
        # The hazard, shown: the restarted server forgot the run; a second instance won it.
        assert answers[-1].outcome is Outcome.WON
        notices = store.notices  # type: ignore[attr-defined]
        assert len(notices) == 1 and "restarted (run id" in notices[0]
        restarts = [r for r in caplog.records if "restarted (run id" in r.getMessage()]
        assert len(restarts) == 1
        assert [op for op, _ in errors.seen] == ["server_restart"]
        health = anarchon.Scheduler(store).health()
        assert health.store_notices == notices
        assert health.to_dict()["store_notices"] == list(notices)
        for _ in range(3):  # later claims do not say it again
            await store.claim(_request("hourly", slot))
        assert len([r for r in caplog.records if "restarted (run id" in r.getMessage()]) == 1
    finally:
        manager.unregister(errors)
        await store.close()


async def test_wait_is_not_consensus_with_two_replicas() -> None:
    """The documented limit: with two replicas and ``wait_replicas=1``, the replica that
    acknowledged a claim is not necessarily the one a failover promotes. Here the second replica
    has stopped replicating (it lags), the claim is confirmed by the first, the primary dies and
    the lagging replica is promoted: a second instance wins the same run. ``wait_replicas=2``
    (every replica that may be promoted) answers ``unknown`` instead of ``won``."""
    first = start_pair()
    if first is None:
        pytest.skip("redis-server is not installed")
    binary = find_binary("redis")
    assert binary is not None
    lagging = start(binary)
    try:
        second = Pair(first.primary, lagging)
        second.attach()  # the primary now has two replicas
        raw = aioredis.Redis.from_url(lagging.url)
        await raw.execute_command("REPLICAOF", "NO", "ONE")  # it stops receiving writes
        await raw.aclose()
        store = await _open(first.primary.url, "lease", **WAIT)
        all_of_them = await _open(
            first.primary.url,
            "lease",
            prefix=store.options.prefix,  # type: ignore[attr-defined]
            wait_replicas=2,
            wait_timeout="100ms",
        )
        try:
            slot = await _slot(store)
            assert (await all_of_them.claim(_request("hourly", slot))).outcome is Outcome.UNKNOWN
            # The first replica confirms it; resent with the same token (C2) while it is still
            # busy with the second replica's attach (WAIT may time out once or twice then).
            nightly = _request("nightly", slot)
            deadline = time.monotonic() + 10
            while not (claim := await store.claim(nightly)).won:
                assert claim.outcome is Outcome.UNKNOWN, claim
                assert time.monotonic() < deadline, f"never confirmed: {claim}"
            assert claim.won  # the first replica has it
        finally:
            await store.close()
            await all_of_them.close()
        first.primary.stop()  # the primary dies; the lagging replica is the one promoted
        promoted = await _open(lagging.url, "lease", prefix=store.options.prefix)  # type: ignore[attr-defined]
        try:
            again = await promoted.claim(_request("nightly", slot, instance="test:2:bbbb"))
            assert again.won, "a second winner: WAIT is not consensus"
        finally:
            await promoted.close()
    finally:
        first.stop()
        lagging.stop()


async def test_the_runtime_resends_an_unconfirmed_claim(replica_resumed: Pair) -> None:
    """`anarchon.once` (the scheduler's claimer): an ``unknown`` that says ``unconfirmed`` is
    resent with the same token, like a transport error, and runs the body once the replica has
    caught up; never before."""
    pair = replica_resumed
    store = await _open(pair.primary.url, "lease", **WAIT)
    try:
        slot = await _slot(store)
        pair.pause_replica()
        ran: list[int] = []

        async def body() -> None:
            async with anarchon.once(store, "nightly", slot, max_late="10m") as run:
                if run:
                    ran.append(run.attempt)

        task = asyncio.create_task(body())
        assert isinstance(store, RedisStore)
        confirm = store.link.confirm
        assert confirm is not None
        await eventually(lambda: confirm.unconfirmed >= 2, 10, "a resend while the replica lags")
        assert ran == []
        pair.resume_replica()
        await asyncio.wait_for(task, 10)
        assert ran == [1]
    finally:
        pair.resume_replica()
        await store.close()


async def test_a_restart_mid_race_is_noticed_once_per_store(
    restartable: Restartable, caplog: pytest.LogCaptureFixture
) -> None:
    """Two stores (two instances) race on ascending slots, 4 tasks each, while the server
    (no persistence) is killed and started again: each store notices the restart exactly once,
    and the race goes on afterwards."""
    stores = [await _open(restartable.url, "lease", restart_check_ms=100)]
    stores.append(await _open(restartable.url, "lease", prefix=stores[0].options.prefix))  # type: ignore[attr-defined]
    first = await _slot(stores[0])
    answered: list[int] = []
    stop = asyncio.Event()

    async def claimant(store: anarchon.ClaimStore, name: str) -> None:
        n = 0
        while not stop.is_set():
            try:
                await store.claim(_request("race", first + n * 1000, instance=name))
                answered.append(n)
                n += 1
            except StoreUnavailable:
                await asyncio.sleep(0.01)

    tasks = [
        asyncio.create_task(claimant(store, f"t:{i}:{t}"))
        for i, store in enumerate(stores)
        for t in range(4)
    ]
    try:
        await eventually(lambda: len(answered) >= 50, 20, "claims before the restart")
        restartable.process.kill()  # type: ignore[union-attr]
        restartable.process.wait()  # type: ignore[union-attr]
        before = len(answered)
        await restartable.start()
        await eventually(lambda: len(answered) >= before + 50, 20, "claims after the restart")
        await eventually(
            lambda: all(store.notices for store in stores),  # type: ignore[attr-defined]
            5,
            "both stores to notice the restart",
        )
    finally:
        stop.set()
        await asyncio.gather(*tasks)
        for store in stores:
            await store.close()
    told = [r for r in caplog.records if "restarted (run id" in r.getMessage()]
    assert len(told) == 2, [r.getMessage() for r in told]
    for store in stores:
        assert store.link.watch.restarts == 1  # type: ignore[attr-defined]
