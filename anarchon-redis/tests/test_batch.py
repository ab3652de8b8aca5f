"""claim_many: one claim script call decides up to BATCH jobs; its answers must be exactly those
of single claims, and its errors those a single claim would raise (DESIGN 11)."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import pytest

import anarchon
from anarchon import (
    Claim,
    ClaimRequest,
    Outcome,
    Overlap,
    RunStatus,
    StoreCorrupt,
    SupportsClaimMany,
)
from anarchon_redis import JobKeys, testing
from anarchon_redis._strategies.idmp import IDMP
from anarchon_redis._strategies.lease import LEASE
from anarchon_redis._strategies.script import WINDOW
from anarchon_redis._strategies.scripted import BATCH

if TYPE_CHECKING:
    from conftest import Env, EnvFactory

ALL = [
    pytest.param(server, strategy, id=f"{server}-{strategy}")
    for server, strategies in (
        ("redis", ("lease", "stream-id", "script")),
        ("valkey", ("lease", "stream-id", "script")),
        ("redis86", ("idmp",)),
    )
    for strategy in strategies
]


async def _batching(env_on: EnvFactory, server: str, strategy: str) -> tuple[Env, Any, int]:
    """The test's env on `server`, a store of `strategy` with claim_many, and this second's slot."""
    env = await env_on(server)
    store = await env.store(strategy)
    assert isinstance(store, SupportsClaimMany)
    return env, store, await env.slot()


FUNCTIONS = {"lease": LEASE.function, "script": WINDOW.function, "idmp": IDMP.function}
"""The Redis function each strategy's claims are, where the server has functions."""


def _answer(claim: Claim) -> tuple[Any, ...]:
    return (claim.outcome, claim.attempt, claim.token, claim.holder, claim.reason[:12])


async def _twins(env: Env, strategy: str) -> tuple[Any, Any]:
    """Two stores of `strategy` under two prefixes, so the same requests meet the same state."""
    one = await env.store(strategy)
    many = await env.store(strategy, prefix=env.prefix + "m")
    return one, many


async def _each(store: Any, requests: list[ClaimRequest]) -> list[tuple[Any, ...]]:
    return [_answer(await store.claim(r)) for r in requests]


async def _many(store: Any, requests: list[ClaimRequest]) -> list[tuple[Any, ...]]:
    assert isinstance(store, SupportsClaimMany)
    return [_answer(c) for c in await store.claim_many(requests)]


@pytest.mark.parametrize(("server", "strategy"), ALL)
async def test_batch_answers_equal_single_claims_over_several_calls(
    env_on: EnvFactory, server: str, strategy: str
) -> None:
    env = await env_on(server)
    one, many = await _twins(env, strategy)
    try:
        slot = await env.slot()
        jobs = BATCH * 2 + 7  # three script calls, the last one short
        mine = [env.request(f"j{i}", slot) for i in range(jobs)]
        first_each, first_many = await _each(one, mine), await _many(many, mine)
        assert first_each == first_many
        assert {a[0] for a in first_many} == {Outcome.WON}
        # Again, mixed: resent claims (C2), rivals, new jobs and a job twice in one batch.
        rivals = [env.request(f"j{i}", slot, instance="rival:2:%b b") for i in range(0, jobs, 3)]
        mixed = [*mine[::2], *rivals, env.request("new", slot), rivals[0]]
        assert await _each(one, mixed) == await _many(many, mixed)
        lost = (await _many(many, rivals[:1]))[0]
        assert lost[0] in (Outcome.LOST, Outcome.RUNNING) and lost[3] == "test:1:aaaa"
    finally:
        await testing.delete_prefix(env.raw, env.prefix + "m")


@pytest.mark.parametrize("server", ["redis", "valkey"])
async def test_lease_batch_answers_equal_single_claims_for_every_rule(
    env_on: EnvFactory, server: str
) -> None:
    env = await env_on(server)
    one, many = await _twins(env, "lease")
    try:
        slot = await env.slot()
        setup = [
            env.request("running", slot, token="a" * 32),
            env.request("expired", slot, token="b" * 32, attempts=2),
            env.request("spent", slot, token="c" * 32, attempts=1),
            env.request("busy", slot - 1000, token="d" * 32),
            env.request("finished", slot, token="e" * 32),
        ]
        for store, prefix in ((one, env.prefix), (many, env.prefix + "m")):
            for request in setup:
                assert (await store.claim(request)).won
            for job in ("expired", "spent"):
                await testing.force_expire(env.raw, prefix, job, slot)
            assert await store.finish("finished", slot, "e" * 32, RunStatus.SUCCEEDED)
        rival = "rival:2:bbbb"
        requests = [
            env.request("running", slot, instance=rival),  # L3 running
            env.request("running", slot, token="a" * 32),  # L2 my own again
            env.request("expired", slot, instance=rival),  # L4 takeover, attempt 2
            env.request("spent", slot, instance=rival, attempts=1),  # L5 interrupted: done
            env.request("finished", slot, instance=rival),  # L6 done
            env.request("busy", slot, overlap=Overlap.SKIP),  # L1 overlap: recorded skip
            env.request("late", slot - 600_000, max_late_ms=1000),  # L1 late: recorded skip
            env.request("coalesced", slot, skip_reason="coalesced: a newer slot"),  # L1 skip
            env.request("fresh", slot),  # L1 won
            env.request("busy", slot, instance=rival),  # the recorded overlap, read back
        ]
        each, batch = await _each(one, requests), await _many(many, requests)
        assert each == batch
        assert [a[0] for a in batch] == [
            Outcome.RUNNING,
            Outcome.WON,
            Outcome.WON,
            Outcome.DONE,
            Outcome.DONE,
            Outcome.SKIPPED,
            Outcome.SKIPPED,
            Outcome.SKIPPED,
            Outcome.WON,
            Outcome.SKIPPED,
        ]
        assert batch[2][1] == 2, "L4: the takeover is attempt 2"
        assert [a[4][:8] for a in batch[5:8]] == ["overlap:", "late: sl", "coalesce"]
        assert batch[9][2] == requests[5].token, "the recorded skip's token, for any claimer"
    finally:
        await testing.delete_prefix(env.raw, env.prefix + "m")


@pytest.mark.parametrize(("server", "strategy"), ALL)
async def test_batch_sends_the_script_again_after_a_flush(
    env_on: EnvFactory, server: str, strategy: str
) -> None:
    env, store, slot = await _batching(env_on, server, strategy)
    function = FUNCTIONS.get(strategy)
    assert store.strategy.functions is (function is not None), "FCALL on Redis 7+ and Valkey"

    async def forget() -> None:  # as a restart without persistence forgets scripts and functions
        await env.raw.script_flush()
        if function:
            await env.raw.function_delete(function)  # ours only: the server is shared

    assert all(c.won for c in await store.claim_many([env.request("warm", slot)]))
    await forget()
    requests = [env.request(f"j{i}", slot) for i in range(BATCH + 1)]
    assert all(c.won for c in await store.claim_many(requests))
    await forget()
    assert (await store.claim(env.request("single", slot))).won


@pytest.mark.parametrize(("server", "strategy"), ALL)
async def test_batch_wrongtype_key_names_it_and_decides_the_others(
    env_on: EnvFactory, server: str, strategy: str
) -> None:
    env, store, slot = await _batching(env_on, server, strategy)
    keys = JobKeys(env.prefix, "bad")
    kind = "runs" if strategy == "lease" else "claims"
    await env.raw.set(keys.runs if strategy == "lease" else keys.claims, "not ours")
    good = env.request("good", slot)
    with pytest.raises(StoreCorrupt, match=rf"key \{{t[0-9a-f]+:bad\}}:{kind} .* is a string"):
        await store.claim_many([good, env.request("bad", slot)])
    assert (await store.claim(good)).won, "the other job was decided (and is mine: C2)"


async def test_lease_batch_malformed_run_names_the_key(env: Env) -> None:
    store = await env.lease_store()
    assert isinstance(store, SupportsClaimMany)
    slot = await env.slot()
    await env.raw.hset(JobKeys(env.prefix, "bad").runs, str(slot), "running no")
    with pytest.raises(StoreCorrupt, match=r"\{t[0-9a-f]+:bad\}:runs field \d+"):
        await store.claim_many([env.request("good", slot), env.request("bad", slot)])
    await env.raw.hset(JobKeys(env.prefix, "bad2").runs, "n", "many")
    with pytest.raises(StoreCorrupt, match=r"\{t[0-9a-f]+:bad2\}:runs field n"):
        await store.claim_many([env.request("bad2", slot)])


@pytest.mark.parametrize("strategy", ["stream-id", "script"])
async def test_stream_batch_malformed_entry_names_the_key(env: Env, strategy: str) -> None:
    store = await env.store(strategy)
    assert isinstance(store, SupportsClaimMany)
    slot = await env.slot()
    keys = JobKeys(env.prefix, "bad")
    await env.raw.xadd(keys.claims, {"foreign": "data"}, id=f"{slot}-0")
    with pytest.raises(StoreCorrupt, match=r"\{t[0-9a-f]+:bad\}:claims entry"):
        await store.claim_many([env.request("good", slot), env.request("bad", slot)])


@pytest.mark.parametrize(("server", "strategy"), ALL)
async def test_holder_with_any_text_comes_back_whole(
    env_on: EnvFactory, server: str, strategy: str
) -> None:
    env, store, slot = await _batching(env_on, server, strategy)
    odd = "web 1 %0A 100% ü"
    first = env.request("job", slot, instance=odd)
    assert (await store.claim(first)).holder == odd
    rival = env.request("job", slot, instance="rival")
    for claim in (await store.claim(rival), (await store.claim_many([rival, rival]))[1]):
        assert not claim.won and claim.holder == odd and claim.token == first.token


async def test_script_scan_stops_early_yet_finds_slots_claimed_out_of_order(env: Env) -> None:
    store = await env.store("script")
    slot = await env.slot()
    order = [slot, slot - 3000, slot + 2000, slot - 1000]  # not in slot order
    mine = {s: env.request("job", s) for s in order}
    for s in order:
        assert (await store.claim(mine[s])).won
    keys = JobKeys(env.prefix, "job")
    entries = await env.raw.xrange(keys.claims)
    assert [int(f["max"]) for _, f in entries] == [slot, slot, slot + 2000, slot + 2000]
    for s in order:
        rival = await store.claim(env.request("job", s, instance="rival"))
        assert rival.outcome is Outcome.LOST and rival.token == mine[s].token, s
    # An entry without max (as written before max existed): the scan goes past it.
    await env.raw.xadd(keys.claims, {"slot": slot + 5000, "token": "f" * 32, "holder": "old"})
    assert (await store.claim(env.request("job", slot - 3000))).outcome is Outcome.LOST
    assert (await store.claim(env.request("job", slot + 5000))).outcome is Outcome.LOST
    assert (await store.claim(env.request("job", slot + 6000))).won
    last = (await env.raw.xrevrange(keys.claims, count=1))[0][1]
    assert int(last["max"]) == slot + 6000


@pytest.mark.parametrize(
    ("query", "script"),
    [("", LEASE), ("?strategy=script", WINDOW), ("?strategy=idmp", IDMP)],
)
@pytest.mark.parametrize("functions", [True, False])
def test_a_single_claim_is_packed_as_a_batch_of_one(
    query: str, script: Any, functions: bool
) -> None:
    """The single claim's own packer (no joins over requests) writes the very bytes the batch
    packer writes for one request, as a function call or as a script."""
    store: Any = anarchon.create_store("redis://127.0.0.1:6379/0" + query)
    strategy = store.strategy
    strategy.functions = functions
    request = ClaimRequest(job="j", slot=1_764_000_000_000, instance="hôte:1:aaaa")
    assert strategy._call_one(script, strategy._option, request) == strategy._call(
        script, strategy._option, (request,)
    )
