"""The no-lease strategies: won / lost / late, C2, each strategy's own decisions, bad data."""

from __future__ import annotations

import asyncio
from typing import TYPE_CHECKING

import pytest

from anarchon import (
    ConfigError,
    LeaseStore,
    Outcome,
    Scheduler,
    StoreCorrupt,
    SupportsClaimMany,
    SupportsJobSetup,
)
from anarchon_redis import IdmpStore, JobKeys, ScriptStore, StreamIdStore

if TYPE_CHECKING:
    from conftest import Env, EnvFactory

STREAMS = [
    pytest.param("redis", "stream-id", id="redis-stream-id"),
    pytest.param("redis", "script", id="redis-script"),
    pytest.param("valkey", "stream-id", id="valkey-stream-id"),
    pytest.param("valkey", "script", id="valkey-script"),
    pytest.param("redis86", "idmp", id="redis86-idmp"),
    pytest.param("redis86", "script", id="redis86-script"),
]


@pytest.mark.parametrize(("server", "strategy"), STREAMS)
async def test_won_lost_and_C2(env_on: EnvFactory, server: str, strategy: str) -> None:
    env = await env_on(server)
    store, other = await env.store(strategy), await env.store(strategy)
    assert not isinstance(store, LeaseStore), "no-lease strategies must not be heartbeated"
    slot = await env.slot()
    mine = env.request("job", slot)
    first = await store.claim(mine)
    assert first.outcome is Outcome.WON and first.attempt == 1 and first.token == mine.token
    for resent_by in (store, other):  # C2: the same token again, from any connection
        assert (await resent_by.claim(mine)).won
    rival = await other.claim(env.request("job", slot, instance="rival:2:bbbb"))
    assert rival.outcome is Outcome.LOST and rival.token == mine.token
    assert rival.holder == "test:1:aaaa"
    assert (await store.claim(env.request("other-job", slot))).won
    history = await store.history("job")
    assert [(r.slot, r.token) for r in history] == [(slot, mine.token)]
    assert store.capabilities.self_recognition and store.capabilities.store_clock
    assert abs((await store.now_ms()) - await env.now()) < 1000


async def test_stream_id_refusal_decides_won_lost_late(env: Env) -> None:
    store = await env.store("stream-id")
    assert isinstance(store, StreamIdStore) and store.capabilities.remembers_ms is None
    slot = await env.slot()
    old, new = env.request("job", slot - 1000), env.request("job", slot)
    assert (await store.claim(old)).won
    assert (await store.claim(new)).won
    assert (await store.claim(old)).won, "refused, and the entry is mine: my resent claim"
    assert (await store.claim(env.request("job", slot - 1000))).outcome is Outcome.LOST
    skipped = await store.claim(env.request("job", slot - 500))
    assert skipped.outcome is Outcome.LATE and "newer slot" in skipped.reason


async def test_stream_id_reads_an_entry_back_whatever_its_field_order(env: Env) -> None:
    """The read-back takes an entry as the store writes it without building its dict; an entry
    with the same fields in another order (another client's XADD) is read field by field."""
    store = await env.store("stream-id")
    keys = JobKeys(env.prefix, "job")
    slot = await env.slot()
    mine = env.request("job", slot)
    fields = {"holder": "other:9:zzzz", "token": mine.token, "slot": str(slot)}
    await env.raw.xadd(keys.claims, fields, id=f"{slot}-0")
    claim = await store.claim(mine)
    assert claim.won and claim.holder == "other:9:zzzz", claim
    other = await store.claim(env.request("job", slot, instance="test:2:bbbb"))
    assert other.outcome is Outcome.LOST and other.token == mine.token, other


async def test_stream_id_trims_to_maxlen_and_trimmed_is_late(env: Env) -> None:
    store = await env.store("stream-id", maxlen=2)
    slot = await env.slot()
    for n in range(4):
        assert (await store.claim(env.request("job", slot + n))).won
    assert await env.raw.xlen(JobKeys(env.prefix, "job").claims) == 2
    assert (await store.claim(env.request("job", slot))).outcome is Outcome.LATE


async def test_script_window_T3(env: Env) -> None:
    store = await env.store("script", window_ms=500)
    assert isinstance(store, ScriptStore) and store.capabilities.remembers_ms == 500
    slot = await env.now()
    first = env.request("job", slot, max_late_ms=100)  # within the window (C5)
    assert (await store.claim(first)).won
    await asyncio.sleep(0.3)  # within the window: remembered, another token loses
    assert (await store.claim(env.request("job", slot, max_late_ms=100))).outcome is Outcome.LOST
    assert (await store.claim(first)).won
    await asyncio.sleep(0.35)  # past the window: a claim still found is never won by another
    after = await store.claim(env.request("job", slot, max_late_ms=100))
    assert after.outcome in (Outcome.LOST, Outcome.LATE), after
    # a slot older than the window with no claim found: the store cannot know, so late
    unknown = await store.claim(env.request("job", slot - 100, max_late_ms=100))
    assert unknown.outcome is Outcome.LATE and "window_ms=500" in unknown.reason


async def test_script_judges_max_late_by_redis_time(env: Env) -> None:
    store = await env.store("script")
    claim = await store.claim(env.request("job", await env.now() - 5_000, max_late_ms=1_000))
    assert claim.outcome is Outcome.LATE and "max_late is 1000 ms" in claim.reason


async def test_idmp_sets_config_once_and_refuses_other_values(env_on: EnvFactory) -> None:
    env = await env_on("redis86")
    store = await env.store("idmp", duration_sec=2, maxsize=50)
    assert isinstance(store, IdmpStore) and store.capabilities.remembers_ms == 2000
    slot = await env.slot()
    # max_late within what Redis remembers (C5 refuses a claim it would forget too soon)
    assert (await store.claim(env.request("job", slot, max_late_ms=1_000))).won
    info = await env.raw.xinfo_stream(JobKeys(env.prefix, "job").claims)
    assert (info["idmp-duration"], info["idmp-maxsize"]) == (2, 50)
    same = await env.store("idmp", duration_sec=2, maxsize=50)
    rival = env.request("job", slot, max_late_ms=1_000)
    assert (await same.claim(rival)).outcome is Outcome.LOST
    different = await env.store("idmp", duration_sec=3, maxsize=50)
    with pytest.raises(ConfigError, match=r"IDMP-DURATION 2 s .* duration_sec=3"):
        await different.claim(rival)
    info = await env.raw.xinfo_stream(JobKeys(env.prefix, "job").claims)
    assert info["idmp-duration"] == 2 and info["iids-tracked"] == 1, "never wiped"


async def test_idmp_scheduler_with_other_settings_refuses_to_start(env_on: EnvFactory) -> None:
    """Issue 5: the second instance refuses to start; the first's claims survive."""
    env = await env_on("redis86")
    first = await env.store("idmp", duration_sec=2, maxsize=50)
    slot = await env.slot()
    won = env.request("job", slot, max_late_ms=1_000)
    assert (await first.claim(won)).won
    assert isinstance(first, SupportsJobSetup)
    await first.setup_jobs(["job", "job"])  # set up already: nothing changes

    def scheduler(duration_sec: int) -> Scheduler:
        second = Scheduler(
            f"{env.url}?strategy=idmp&duration_sec={duration_sec}&maxsize=50",
            prefix=env.prefix,
            instance="second:2:bbbb",
        )
        for name in ("job", "other"):  # max_late within what Redis remembers (T3)
            second.add_job(lambda: None, "* * * * *", name=name, max_late="1s")
        return second

    with pytest.raises(ConfigError, match=r"IDMP-DURATION 2 s .* duration_sec=3"):
        await scheduler(duration_sec=3).start()
    keys = JobKeys(env.prefix, "job")
    info = await env.raw.xinfo_stream(keys.claims)
    assert (info["idmp-duration"], info["iids-tracked"]) == (2, 1), "never wiped"
    assert (await first.claim(won)).won, "the first instance's claim is still known (C2)"

    same = scheduler(duration_sec=2)
    await same.start()  # the same settings: starts, and sets up the job it was first to see
    try:
        other = await env.raw.xinfo_stream(JobKeys(env.prefix, "other").claims)
        assert (other["idmp-duration"], other["idmp-maxsize"]) == (2, 50)
        assert other["length"] == 0, "setting a job up claims nothing"
    finally:
        await same.stop()


async def test_idmp_existing_stream_without_ids_is_configured(env_on: EnvFactory) -> None:
    env = await env_on("redis86")
    keys = JobKeys(env.prefix, "job")
    await env.raw.xadd(keys.claims, {"slot": 1, "token": "x" * 32, "holder": "h"})
    store = await env.store("idmp")
    assert (await store.claim(env.request("job", await env.slot()))).won
    info = await env.raw.xinfo_stream(keys.claims)
    assert (info["idmp-duration"], info["idmp-maxsize"]) == (600, 1000)


async def test_idmp_deleted_stream_is_configured_again(env_on: EnvFactory) -> None:
    env = await env_on("redis86")
    store = await env.store("idmp", duration_sec=30)
    keys = JobKeys(env.prefix, "job")
    slot = await env.slot()
    late = {"max_late_ms": 10_000}  # within the 30 s Redis remembers (C5)
    assert (await store.claim(env.request("job", slot, **late))).won
    await env.raw.delete(keys.claims)
    assert (await store.claim(env.request("job", slot + 1000, **late))).won
    info = await env.raw.xinfo_stream(keys.claims)
    assert info["idmp-duration"] == 30, "never Redis' default settings"
    await env.raw.delete(keys.claims, keys.idmp_config)
    assert (await store.claim(env.request("job", slot + 2000, **late))).won
    assert (await env.raw.xinfo_stream(keys.claims))["idmp-duration"] == 30


@pytest.mark.parametrize("server", ["redis", "valkey"])
async def test_idmp_on_older_server_names_strategy_script(env_on: EnvFactory, server: str) -> None:
    env = await env_on(server)
    with pytest.raises(ConfigError, match=r"needs Redis 8\.6\+.*use strategy=script"):
        await env.store("idmp")


@pytest.mark.parametrize(("server", "strategy"), STREAMS)
async def test_wrongtype_key_is_store_corrupt_naming_it(
    env_on: EnvFactory, server: str, strategy: str
) -> None:
    env = await env_on(server)
    store = await env.store(strategy)
    keys = JobKeys(env.prefix, "job")
    await env.raw.set(keys.claims, "not a stream")
    with pytest.raises(StoreCorrupt, match=r"key \{t[0-9a-f]+:job\}:claims .* is a string"):
        await store.claim(env.request("job", await env.slot()))


@pytest.mark.parametrize(("server", "strategy"), STREAMS)
async def test_malformed_entry_is_store_corrupt(
    env_on: EnvFactory, server: str, strategy: str
) -> None:
    env = await env_on(server)
    store = await env.store(strategy)
    keys = JobKeys(env.prefix, "job")
    slot = await env.slot()
    assert (await store.claim(env.request("job", slot))).won
    foreign_id = f"{slot + 1}-0" if strategy == "stream-id" else "*"
    await env.raw.xadd(keys.claims, {"foreign": "data"}, id=foreign_id)
    with pytest.raises(StoreCorrupt, match=r"\{t[0-9a-f]+:job\}:claims"):
        await store.history("job")
    if strategy != "idmp":  # idmp reads only the entry Redis answers with
        with pytest.raises(StoreCorrupt, match=r"\{t[0-9a-f]+:job\}:claims"):
            await store.claim(env.request("job", slot + 1))


async def test_options_are_checked_per_strategy(env: Env) -> None:
    with pytest.raises(ConfigError, match="duration_sec applies only to strategy=idmp"):
        await env.store("script", duration_sec=5)
    with pytest.raises(ConfigError, match="window_ms applies only to strategy=script"):
        await env.store("lease", window_ms=500)
    with pytest.raises(ConfigError, match="maxlen applies only"):
        await env.store("script", maxlen=5)
    with pytest.raises(ConfigError, match="duration_sec must be from 1 to 86400"):
        await env.store("idmp", duration_sec=86_401)
    with pytest.raises(ConfigError, match="maxsize must be from 1 to 10000"):
        await env.store("idmp", maxsize=0)
    with pytest.raises(ConfigError, match="strategy must be one of lease, stream-id"):
        await env.store("fastest")
    with pytest.raises(ConfigError, match="unknown option"):
        await env.store("lease", nonsense=1)


BATCHED = [
    pytest.param("redis", "stream-id", id="redis-stream-id"),
    pytest.param("redis", "script", id="redis-script"),
    pytest.param("valkey", "stream-id", id="valkey-stream-id"),
    pytest.param("valkey", "script", id="valkey-script"),
]


@pytest.mark.parametrize(("server", "strategy"), BATCHED)
async def test_claim_many_answers_as_claims_one_by_one(
    env_on: EnvFactory, server: str, strategy: str
) -> None:
    env = await env_on(server)
    store, other = await env.store(strategy), await env.store(strategy)
    assert store.capabilities.batch and isinstance(store, SupportsClaimMany)
    slot = await env.slot()
    mine = [env.request(f"job{i}", slot) for i in range(5)]
    assert await store.claim_many([]) == []
    first = await store.claim_many(mine)
    assert [(c.outcome, c.token) for c in first] == [(Outcome.WON, r.token) for r in mine]
    resent = await other.claim_many(mine)  # C2: the same tokens again, from another connection
    assert all(c.won for c in resent)
    rivals = [env.request(f"job{i}", slot, instance="rival:2:bbbb") for i in range(5)]
    lost = await other.claim_many([*rivals, env.request("job5", slot)])
    assert [c.outcome for c in lost] == [Outcome.LOST] * 5 + [Outcome.WON]
    assert [c.token for c in lost[:5]] == [r.token for r in mine]
    assert {c.holder for c in lost[:5]} == {"test:1:aaaa"}
    # A late request among others: below the stream's top (stream-id) or past max_late (script).
    late = (
        env.request("job0", slot - 1000)
        if strategy == "stream-id"
        else env.request("job0", slot - 10_000, max_late_ms=1_000)
    )
    mixed = await store.claim_many([late, env.request("job6", slot)])
    assert [c.outcome for c in mixed] == [Outcome.LATE, Outcome.WON]
    for i, request in enumerate(mine):
        history = await store.history(f"job{i}")
        assert [(r.slot, r.token) for r in history] == [(slot, request.token)]


async def test_stream_id_claim_many_slot_zero_is_late(env: Env) -> None:
    store = await env.store("stream-id")
    assert isinstance(store, SupportsClaimMany)
    claims = await store.claim_many([env.request("a", 0), env.request("b", await env.slot())])
    assert [c.outcome for c in claims] == [Outcome.LATE, Outcome.WON]
