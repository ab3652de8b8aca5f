"""strategy=lease: what Redis adds to the lease rules. The rules themselves (L1-L11, C2, the
ledger) are certified by the conformance kit (test_conformance.py); here only what is Redis's own:
a check that reads without the script, the floor and event stream keys, scripts and functions
loaded again after a flush, TIME as the clock, damaged keys. Leases are aged with a backdoor HSET
(`anarchon_redis.testing`), never by sleeping past them."""

from __future__ import annotations

import asyncio
from typing import TYPE_CHECKING, Any

import pytest

from anarchon import Claim, ClaimRequest, LeaseStore, Outcome, RunStatus, StoreCorrupt
from anarchon_redis import JobKeys, RedisLeaseStore, testing
from anarchon_redis._strategies.lease import LEASE

if TYPE_CHECKING:
    from conftest import Env


async def test_L10_check_reads_without_the_script(
    env: Env, monkeypatch: pytest.MonkeyPatch
) -> None:
    store = await env.lease_store()
    slot = await env.slot()
    request = env.request("job", slot)
    await store.claim(request)
    calls = []
    strategy: Any = store.strategy  # L10: check calls the strategy's claim, not the store's
    real = strategy.claim

    async def counting(link: Any, request: ClaimRequest) -> Claim:
        calls.append(request)
        return await real(link, request)

    monkeypatch.setattr(strategy, "claim", counting)
    backup = env.request("job", slot, instance="backup:2:bbbb")
    assert (await store.check(backup)).outcome is Outcome.RUNNING
    assert calls == [], "L10: a live lease is answered by a plain read"
    await testing.force_expire(env.raw, env.prefix, "job", slot)
    taken = await store.check(backup)
    assert taken.won and taken.attempt == 2 and len(calls) == 1
    assert await store.finish("job", slot, backup.token, RunStatus.SUCCEEDED)
    assert (await store.check(env.request("job", slot))).outcome is Outcome.DONE
    assert len(calls) == 1


async def test_L11_forgotten_run_is_late_and_floor_rises(env: Env) -> None:
    store = await env.lease_store(history_limit=1, retention_margin_ms=1)
    now = await env.now()
    old = env.request("job", now - 50, lease_ms=50, max_late_ms=100, attempts=1)
    assert (await store.claim(old)).won
    assert await store.finish("job", old.slot, old.token, RunStatus.SUCCEEDED)
    await asyncio.sleep(0.25)  # past slot + max_late + attempts * lease + margin: may go now
    newer = env.request("job", await env.now() - 10, lease_ms=50, max_late_ms=100)
    assert (await store.claim(newer)).won
    assert await testing.raw_run(env.raw, env.prefix, "job", old.slot) is None
    assert await testing.floor(env.raw, env.prefix, "job") == old.slot
    again = await store.claim(env.request("job", old.slot, max_late_ms=3_600_000))
    assert again.outcome is Outcome.LATE and again.reason.startswith("forgotten")
    assert [r.slot for r in await store.history("job")] == [newer.slot]


async def test_history_newest_first_with_limit(env: Env) -> None:
    store = await env.lease_store()
    slot = await env.slot()
    for n in range(4):
        await store.claim(env.request("job", slot - n * 1000))
    runs = await store.history("job", limit=3)
    assert [r.slot for r in runs] == [slot, slot - 1000, slot - 2000]
    assert await store.history("nothing") == []
    events = await env.raw.xlen(JobKeys(env.prefix, "job").events)
    assert events == 4


async def test_claim_many_in_one_round_trip(env: Env) -> None:
    store = await env.lease_store()
    assert isinstance(store, RedisLeaseStore)
    slot = await env.slot()
    requests = [env.request(f"job{n}", slot) for n in range(5)]
    await env.raw.script_flush()  # the NOSCRIPT path too
    claims = await store.claim_many(requests)
    assert [c.outcome for c in claims] == [Outcome.WON] * 5
    again = await store.claim_many([*requests, env.request("job0", slot)])
    assert [c.outcome for c in again] == [Outcome.WON] * 5 + [Outcome.RUNNING]
    assert await store.claim_many([]) == []


async def test_script_reloaded_after_script_flush(env: Env) -> None:
    store = await env.lease_store()
    await env.raw.script_flush()
    assert (await store.claim(env.request("job", await env.slot()))).won


@pytest.mark.parametrize("server", ["redis", "valkey"])
async def test_claims_are_a_function_loaded_again_after_function_flush(
    env_on: Any, server: str
) -> None:
    env = await env_on(server)
    store = await env.lease_store()
    assert isinstance(store, RedisLeaseStore) and store.strategy.functions, (
        "Redis 7+ and Valkey: FCALL"
    )
    slot = await env.slot()
    first = env.request("job", slot)
    assert (await store.claim(first)).won
    library = LEASE.function
    # as a restart without persistence forgets functions (only ours: the server is shared)
    await env.raw.function_delete(library)
    assert (await store.claim(env.request("job2", slot))).won
    await env.raw.function_delete(library)
    claims = await store.claim_many([env.request(f"b{i}", slot) for i in range(3)])
    assert all(c.won for c in claims)
    assert await store.renew("job", slot, first.token, 60_000)  # renew is a script: unaffected
    assert await env.raw.function_list(library=library), "loaded again"


async def test_now_ms_is_redis_time(env: Env) -> None:
    store = await env.lease_store()
    assert isinstance(store, LeaseStore)
    assert abs(await store.now_ms() - await env.now()) < 1000


async def test_malformed_run_is_store_corrupt_naming_the_key(env: Env) -> None:
    store = await env.lease_store()
    slot = await env.slot()
    keys = JobKeys(env.prefix, "job")
    await env.raw.hset(keys.runs, str(slot), "not json")
    with pytest.raises(StoreCorrupt, match=r"\{t[0-9a-f]+:job\}:runs field \d+"):
        await store.claim(env.request("job", slot))
    with pytest.raises(StoreCorrupt, match="runs field"):
        await store.check(env.request("job", slot))
    await env.raw.hset(keys.runs, str(slot), '{"status": "bogus", "attempt": 1}')
    with pytest.raises(StoreCorrupt, match="status"):
        await store.renew("job", slot, "a" * 32, 1000)
    await env.raw.hset(keys.runs, "floor", "yesterday")
    with pytest.raises(StoreCorrupt, match="floor"):
        await store.claim(env.request("job", slot + 1000))


async def test_wrongtype_key_is_store_corrupt_naming_the_key(env: Env) -> None:
    store = await env.lease_store()
    keys = JobKeys(env.prefix, "job")
    await env.raw.set(keys.slots, "mine")
    with pytest.raises(StoreCorrupt, match=r"key \{t[0-9a-f]+:job\}:slots .* is a string"):
        await store.claim(env.request("job", await env.slot()))
    with pytest.raises(StoreCorrupt, match="slots"):
        await store.history("job")
