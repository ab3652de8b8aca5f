"""What Redis adds to the ledger (S1), C2 for finish and early claims (C5), per strategy.

The rules themselves (skip records, L1's order, later claims, forgotten slots, C2 for finish,
C5's never-twice) are certified by the conformance kit on every strategy and server
(test_conformance.py). Kept here: what only the Redis scripts and keys show: the escaping of
odd holders and reasons in the scripts' answers, the events stream, the check script's own
path, the Lua late text, one stream entry per skip, the batch path (`claim_many`, which the kit
does not call), the script strategy's window and stream-id's slot-ordered memory.
"""

from __future__ import annotations

import asyncio
from typing import TYPE_CHECKING, Any

import pytest

from anarchon import (
    ConfigError,
    LeaseStore,
    Outcome,
    RunStatus,
    SupportsClaimMany,
)
from anarchon.backend import early_claim_error, late_reason
from anarchon_redis import JobKeys, testing

if TYPE_CHECKING:
    from conftest import Env, EnvFactory

COALESCED = "coalesced: slot 5 is due too; catch_up 'latest' runs only the newest"
ODD_HOLDER = "web 1 %0A 100% ü"
"""A holder with every character the claim scripts' answers escape."""
ODD_REASON = "paused: by ops 100% sure, see ticket #7 (ü)"
"""A skip reason with spaces and percent signs, which the answers must bring back whole."""

STREAMS = [
    pytest.param("redis", "stream-id", id="redis-stream-id"),
    pytest.param("redis", "script", id="redis-script"),
    pytest.param("valkey", "stream-id", id="valkey-stream-id"),
    pytest.param("valkey", "script", id="valkey-script"),
    pytest.param("redis86", "idmp", id="redis86-idmp"),
]


# --- strategy=lease -------------------------------------------------------------------------


async def test_S1_lease_skip_reason_is_recorded_for_claim_check_history(env: Env) -> None:
    store = await env.lease_store()
    slot = await env.slot()
    request = env.request("job", slot, skip_reason=ODD_REASON, instance=ODD_HOLDER)
    claim = await store.claim(request)
    assert (claim.outcome, claim.attempt, claim.token, claim.holder, claim.reason) == (
        Outcome.SKIPPED,
        0,
        request.token,
        ODD_HOLDER,
        ODD_REASON,
    )
    run = await testing.raw_run(env.raw, env.prefix, "job", slot)
    assert run is not None
    assert (run.status, run.attempt, run.token, run.holder, run.error, run.lease_until) == (
        RunStatus.SKIPPED,
        0,
        request.token,
        ODD_HOLDER,
        ODD_REASON,
        None,
    )
    assert run.claimed_at == run.finished_at and run.claimed_at is not None
    assert abs(run.claimed_at - await env.now()) < 1000, "the store's clock"
    # Every later claim, check and batch answers the record, whoever asks.
    rival = env.request("job", slot, instance="rival:2:bbbb")
    assert isinstance(store, SupportsClaimMany)
    for later in (
        await store.claim(request),
        await store.claim(rival),
        await store.check(rival),
        *(await store.claim_many([rival, request])),
    ):
        assert (later.outcome, later.attempt, later.token, later.holder, later.reason) == (
            Outcome.SKIPPED,
            0,
            request.token,
            ODD_HOLDER,
            ODD_REASON,
        ), later
    assert await store.history("job") == [run]
    events = await env.raw.xrange(JobKeys(env.prefix, "job").events)
    assert [e[1]["event"] for e in events] == ["skipped"]
    # Nothing can run, renew, release or finish a skipped slot.
    assert not await store.renew("job", slot, request.token, 1000)
    assert not await store.release("job", slot, request.token)
    assert not await store.finish("job", slot, request.token, RunStatus.SUCCEEDED)
    assert await testing.raw_run(env.raw, env.prefix, "job", slot) == run


async def test_S1_lease_check_of_a_slot_without_run_records_the_skip(env: Env) -> None:
    store = await env.lease_store()
    slot = await env.slot()
    claim = await store.check(env.request("job", slot, skip_reason=COALESCED))
    assert claim.outcome is Outcome.SKIPPED and claim.reason == COALESCED
    run = await testing.raw_run(env.raw, env.prefix, "job", slot)
    assert run is not None and run.status is RunStatus.SKIPPED


async def test_S1_lease_late_text_equals_the_python_helper(env: Env) -> None:
    store = await env.lease_store()
    slot = await env.slot() - 7_000
    request = env.request("job", slot, max_late_ms=2_000)
    claim = await store.claim(request)
    run = await testing.raw_run(env.raw, env.prefix, "job", slot)
    assert run is not None and run.claimed_at is not None
    assert claim.reason == late_reason(request, run.claimed_at, None) == run.error


async def test_C2_finish_resent_is_true_and_writes_nothing(env: Env) -> None:
    """The kit checks the answer and the run; here: the resend appends no event either."""
    store = await env.lease_store()
    slot = await env.slot()
    request = env.request("job", slot)
    assert (await store.claim(request)).won
    assert await store.finish("job", slot, request.token, RunStatus.FAILED, "boom")
    before = await testing.raw_run(env.raw, env.prefix, "job", slot)
    events = await env.raw.xlen(JobKeys(env.prefix, "job").events)
    await asyncio.sleep(0.01)  # a write now would show a later finished_at
    assert await store.finish("job", slot, request.token, RunStatus.FAILED, "other text")
    assert await testing.raw_run(env.raw, env.prefix, "job", slot) == before
    assert await env.raw.xlen(JobKeys(env.prefix, "job").events) == events


# --- no-lease strategies ---------------------------------------------------------------------


@pytest.mark.parametrize(("server", "strategy"), STREAMS)
async def test_S1_skip_entry_answers_skipped_to_writer_later_claims_and_history(
    env_on: EnvFactory, server: str, strategy: str
) -> None:
    env = await env_on(server)
    store, other = await env.store(strategy), await env.store(strategy)
    assert not isinstance(store, LeaseStore) and store.capabilities.skips
    slot = await env.slot()
    request = env.request("job", slot, skip_reason=ODD_REASON, instance=ODD_HOLDER)
    expected = (Outcome.SKIPPED, 0, request.token, ODD_HOLDER, ODD_REASON)

    def answer(claim: Any) -> tuple[Any, ...]:
        return (claim.outcome, claim.attempt, claim.token, claim.holder, claim.reason)

    assert answer(await store.claim(request)) == expected, "the writer"
    rival = env.request("job", slot, instance="rival:2:bbbb")
    assert isinstance(other, SupportsClaimMany)
    for later in (
        await other.claim(request),  # resent (C2)
        await other.claim(rival),
        *(await other.claim_many([rival, request])),
    ):
        assert answer(later) == expected, later
    keys = JobKeys(env.prefix, "job")
    assert len(await env.raw.xrange(keys.claims)) == 1, "one entry: the skip took the slot"
    (run,) = await store.history("job")
    assert (run.slot, run.status, run.attempt, run.token, run.holder, run.error) == (
        slot,
        RunStatus.SKIPPED,
        0,
        request.token,
        ODD_HOLDER,
        ODD_REASON,
    )
    assert run.claimed_at == run.finished_at and run.lease_until is None
    assert await testing.raw_claim(env.raw, env.prefix, "job", slot) == run


@pytest.mark.parametrize(("server", "strategy"), STREAMS)
async def test_S1_skips_in_a_batch_answer_as_one_by_one(
    env_on: EnvFactory, server: str, strategy: str
) -> None:
    env = await env_on(server)
    store = await env.store(strategy)
    assert isinstance(store, SupportsClaimMany)
    slot = await env.slot()
    claimed = env.request("claimed", slot)
    assert (await store.claim(claimed)).won
    skips = [env.request(f"job{i}", slot, skip_reason=COALESCED) for i in range(3)]
    late_skip = env.request("claimed", slot, skip_reason=COALESCED)  # the slot is taken
    claims = await store.claim_many([*skips, late_skip, env.request("fresh", slot)])
    assert [c.outcome for c in claims] == [Outcome.SKIPPED] * 3 + [Outcome.LOST, Outcome.WON]
    assert [c.token for c in claims[:3]] == [r.token for r in skips]
    assert claims[3].token == claimed.token, "a skip for a claimed slot answers as a claim would"
    (run,) = await store.history("claimed")
    assert run.status is RunStatus.CLAIMED and run.token == claimed.token, "nothing written"


async def test_S1_script_records_a_skip_older_than_max_late_within_the_window(
    env: Env,
) -> None:
    """A skip lets nobody run the slot, so the script strategy appends it past max_late too
    (within the window); a claim of such a slot is still late."""
    store = await env.store("script", window_ms=60_000)
    slot = await env.slot() - 10_000
    late = env.request("job", slot, max_late_ms=1_000)
    assert (await store.claim(late)).outcome is Outcome.LATE
    skip = env.request("job", slot, max_late_ms=1_000, skip_reason="late: slot is too old")
    assert (await store.claim(skip)).outcome is Outcome.SKIPPED
    again = await store.claim(late)
    assert again.outcome is Outcome.SKIPPED and again.token == skip.token
    older = env.request("job", slot - 100_000, max_late_ms=1_000, skip_reason="late: older")
    assert (await store.claim(older)).outcome is Outcome.LATE, "past the window: forgotten"


# --- C5: early claims ------------------------------------------------------------------------

WINDOWED = [
    pytest.param("redis", "script", {"window_ms": 2_000}, id="redis-script"),
    pytest.param("valkey", "script", {"window_ms": 2_000}, id="valkey-script"),
    pytest.param("redis86", "idmp", {"duration_sec": 2}, id="redis86-idmp"),
]


@pytest.mark.parametrize(("server", "strategy", "window"), WINDOWED)
async def test_C5_early_refusal_is_the_shared_error_in_claim_and_claim_many(
    env_on: EnvFactory, server: str, strategy: str, window: dict[str, int]
) -> None:
    env = await env_on(server)
    store = await env.store(strategy, **window)
    assert isinstance(store, SupportsClaimMany)
    now = await env.now()
    request = env.request("job", now + 60_000, max_late_ms=1_000)
    with pytest.raises(ConfigError) as caught:
        await store.claim(request)
    text = str(caught.value)
    ahead = int(text.split("the slot is ")[1].split(" ms")[0])
    assert 55_000 < ahead <= 60_000
    expected = early_claim_error(request, request.slot - ahead, 2_000)
    assert expected is not None and text == str(expected)
    fine = env.request("other", now, max_late_ms=1_000)
    with pytest.raises(ConfigError, match="rule C5"):
        await store.claim_many([fine, request])
    assert not await env.raw.xrange(JobKeys(env.prefix, "job").claims)
    # max_late beyond what the store remembers: refused even at the slot (T3 misconfigured)
    with pytest.raises(ConfigError, match="remembers a claim for 2000 ms"):
        await store.claim(env.request("job", now, max_late_ms=60_000))


@pytest.mark.parametrize("server", ["redis", "valkey"])
async def test_C5_stream_id_remembers_by_slot_and_takes_early_claims(
    env_on: EnvFactory, server: str
) -> None:
    """stream-id needs no early check: the slot is the entry ID, so a claim is known until it
    is trimmed, whatever the time, and no slot at or below the stream's top is added again."""
    env = await env_on(server)
    store = await env.store("stream-id", maxlen=1)
    slot = await env.slot() + 3_600_000
    first = env.request("job", slot)
    assert (await store.claim(first)).won
    assert (await store.claim(env.request("job", slot))).outcome is Outcome.LOST
    assert (await store.claim(env.request("job", slot + 1000))).won  # trims the first entry
    gone = await store.claim(env.request("job", slot))
    assert gone.outcome is Outcome.LATE, "trimmed: never won again"
