"""strategy=lease, rule by rule (DESIGN section 5). Leases are aged with a backdoor HSET
(`anarchon_redis.testing`), never by sleeping past them; lateness uses slots in the past."""

from __future__ import annotations

import asyncio
from typing import TYPE_CHECKING, Any

import pytest

from anarchon import Claim, ClaimRequest, LeaseStore, Outcome, Overlap, RunStatus, StoreCorrupt
from anarchon._leases import late_reason, overlap_reason
from anarchon_redis import JobKeys, RedisLeaseStore, testing
from anarchon_redis._lease import LEASE

if TYPE_CHECKING:
    from conftest import Env


async def test_L1_first_claim_is_won_with_attempt_1(env: Env) -> None:
    store = await env.lease_store()
    slot = await env.slot()
    request = env.request("job", slot, lease_ms=30_000)
    claim = await store.claim(request)
    assert claim.outcome is Outcome.WON and claim.attempt == 1 and claim.token == request.token
    run = await testing.raw_run(env.raw, env.prefix, "job", slot)
    assert run is not None and run.status is RunStatus.RUNNING and run.token == request.token
    assert run.lease_until is not None and 29_000 <= run.lease_until - await env.now() <= 30_000


async def test_L1_S1_late_slot_is_recorded_skipped(env: Env) -> None:
    store = await env.lease_store()
    slot = await env.slot() - 10_000
    request = env.request("job", slot, max_late_ms=5_000)
    claim = await store.claim(request)
    assert claim.outcome is Outcome.SKIPPED and claim.skip_kind == "late", claim
    age = int(claim.reason.split()[3])
    assert 10_000 <= age < 20_000
    assert claim.reason == late_reason(request, slot + age, None), "the text of anarchon._leases"
    run = await testing.raw_run(env.raw, env.prefix, "job", slot)
    assert run is not None and run.status is RunStatus.SKIPPED and run.error == claim.reason


async def test_L1_S1_overlap_is_recorded_naming_the_holding_slot(env: Env) -> None:
    store = await env.lease_store()
    slot = await env.slot()
    assert (await store.claim(env.request("job", slot - 1000))).won
    assert (await store.claim(env.request("job", slot - 3000))).won
    await testing.force_expire(env.raw, env.prefix, "job", slot - 3000)  # not live: not named
    skip = await store.claim(env.request("job", slot, overlap=Overlap.SKIP))
    assert skip.outcome is Outcome.SKIPPED and skip.reason == overlap_reason(slot - 1000), skip
    run = await testing.raw_run(env.raw, env.prefix, "job", slot)
    assert run is not None and run.status is RunStatus.SKIPPED and run.error == skip.reason
    await testing.force_expire(env.raw, env.prefix, "job", slot - 1000)
    again = await store.claim(env.request("job", slot, overlap=Overlap.SKIP))
    assert again.outcome is Outcome.SKIPPED and again.token == skip.token, "recorded: never won"
    allow = await store.claim(env.request("job", slot + 1000, overlap=Overlap.ALLOW))
    assert allow.won


async def test_L2_C2_same_token_is_won_again_and_changes_nothing(env: Env) -> None:
    store, other = await env.lease_store(), await env.lease_store()
    slot = await env.slot()
    request = env.request("job", slot)
    first = await store.claim(request)
    before = await testing.raw_run(env.raw, env.prefix, "job", slot)
    again = await other.claim(request)
    assert again.won and again.attempt == first.attempt == 1
    assert await testing.raw_run(env.raw, env.prefix, "job", slot) == before


async def test_L3_other_token_sees_running(env: Env) -> None:
    store = await env.lease_store()
    slot = await env.slot()
    first = env.request("job", slot)
    await store.claim(first)
    claim = await store.claim(env.request("job", slot, instance="other:2:bbbb"))
    assert claim.outcome is Outcome.RUNNING and claim.token == first.token
    assert claim.holder == "test:1:aaaa"


async def test_L4_takeover_after_expiry_even_when_late(env: Env) -> None:
    store = await env.lease_store()
    slot = await env.slot() - 5_000
    await store.claim(env.request("job", slot, max_late_ms=60_000))
    await testing.force_expire(env.raw, env.prefix, "job", slot)
    backup = env.request("job", slot, max_late_ms=1, instance="backup:2:bbbb")
    claim = await store.claim(backup)
    assert claim.won and claim.attempt == 2 and claim.holder == "backup:2:bbbb"
    run = await testing.raw_run(env.raw, env.prefix, "job", slot)
    assert run is not None and run.attempt == 2 and run.token == backup.token


async def test_L5_no_attempts_left_is_interrupted(env: Env) -> None:
    store = await env.lease_store()
    slot = await env.slot()
    await store.claim(env.request("job", slot, attempts=1))
    await testing.force_expire(env.raw, env.prefix, "job", slot)
    claim = await store.claim(env.request("job", slot, attempts=1))
    assert claim.outcome is Outcome.DONE and "interrupted" in claim.reason
    run = await testing.raw_run(env.raw, env.prefix, "job", slot)
    assert run is not None and run.status is RunStatus.INTERRUPTED and run.finished_at
    assert run.error == "lease of attempt 1 ran out with no attempts left"


@pytest.mark.parametrize("status", [RunStatus.SUCCEEDED, RunStatus.FAILED])
async def test_L6_finished_is_done_for_any_token(env: Env, status: RunStatus) -> None:
    store = await env.lease_store()
    slot = await env.slot()
    request = env.request("job", slot)
    await store.claim(request)
    assert await store.finish("job", slot, request.token, status, "boom")
    for token in (request.token, None):
        fields: dict[str, Any] = {"token": token} if token else {}
        claim = await store.claim(env.request("job", slot, **fields))
        assert claim.outcome is Outcome.DONE and claim.reason == f"run {status}"
    run = await testing.raw_run(env.raw, env.prefix, "job", slot)
    assert run is not None and run.status is status and run.error == "boom"


async def test_L7_renew_only_with_the_token(env: Env) -> None:
    store = await env.lease_store()
    slot = await env.slot()
    request = env.request("job", slot, lease_ms=1_000)
    await store.claim(request)
    assert await store.renew("job", slot, request.token, 90_000)
    run = await testing.raw_run(env.raw, env.prefix, "job", slot)
    assert run is not None and run.lease_until is not None
    assert run.lease_until - await env.now() > 80_000
    assert not await store.renew("job", slot, "f" * 32, 90_000)
    assert not await store.renew("job", slot + 1, request.token, 90_000)


async def test_L8_finish_fences_a_taken_over_runner(env: Env) -> None:
    store = await env.lease_store()
    slot = await env.slot()
    old = env.request("job", slot)
    await store.claim(old)
    await testing.force_expire(env.raw, env.prefix, "job", slot)
    new = env.request("job", slot)
    assert (await store.claim(new)).attempt == 2
    assert not await store.finish("job", slot, old.token, RunStatus.SUCCEEDED)
    assert not await store.renew("job", slot, old.token, 1000)
    assert not await store.release("job", slot, old.token)
    assert await store.finish("job", slot, new.token, RunStatus.SUCCEEDED)
    assert not await store.finish("job", slot, new.token, RunStatus.FAILED)


async def test_L9_release_hands_over_at_once(env: Env) -> None:
    store = await env.lease_store()
    slot = await env.slot()
    request = env.request("job", slot)
    await store.claim(request)
    assert not await store.release("job", slot, "e" * 32)
    assert await store.release("job", slot, request.token)
    claim = await store.claim(env.request("job", slot))
    assert claim.won and claim.attempt == 2


async def test_L10_check_reads_without_the_script(
    env: Env, monkeypatch: pytest.MonkeyPatch
) -> None:
    store = await env.lease_store()
    slot = await env.slot()
    request = env.request("job", slot)
    await store.claim(request)
    calls = []
    real = store.claim

    async def counting(request: ClaimRequest) -> Claim:
        calls.append(request)
        return await real(request)

    monkeypatch.setattr(store, "claim", counting)
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


async def test_L11_runs_within_retention_are_kept(env: Env) -> None:
    store = await env.lease_store(history_limit=1)
    slot = await env.slot()
    for n in range(3):
        assert (await store.claim(env.request("job", slot + n * 1000))).won
    assert len(await store.history("job")) == 3  # none past keep_until yet
    assert await testing.floor(env.raw, env.prefix, "job") is None


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
    assert isinstance(store, RedisLeaseStore) and store._functions, "Redis 7+ and Valkey: FCALL"
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
