"""The ledger (S1), C2 for finish and early claims (C5), on every strategy.

strategy=lease records a slot it decides not to run (late, a caller's skip reason, overlap) as a
``skipped`` run in the claim script; the no-lease strategies take the slot with a skip's entry
when the request carries a skip reason. Either way later claims answer `skipped` and `history`
shows why. Strategies that remember a claim for a window counted from when it is written
(script, idmp) refuse a claim they could forget before ``slot + max_late``.
"""

from __future__ import annotations

import asyncio
from typing import TYPE_CHECKING, Any

import pytest

from anarchon import (
    ConfigError,
    LeaseStore,
    Outcome,
    Overlap,
    RunStatus,
    SupportsClaimMany,
)
from anarchon._leases import early_claim_error, late_reason, overlap_reason
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


async def _until(env: Env, instant: int, deadline_s: float = 15.0) -> None:
    """Wait until Redis TIME reaches `instant` (epoch ms), polling, at most `deadline_s`."""
    async with asyncio.timeout(deadline_s):
        left = instant - await env.now()
        while left > 0:  # the server's clock, not ours: poll it
            await asyncio.sleep(min(left, 50) / 1000)
            left = instant - await env.now()


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


async def test_S1_lease_L1_order_forgotten_late_skip_reason_overlap(env: Env) -> None:
    store = await env.lease_store(history_limit=1, retention_margin_ms=1)
    now = await env.now()
    # 1. at or below the floor: late, nothing written (even with a skip reason)
    old = env.request("job", now - 300, lease_ms=50, max_late_ms=100, attempts=1)
    assert (await store.claim(old)).outcome is Outcome.SKIPPED, "late: recorded"
    newer = env.request("job", now - 10, lease_ms=50, max_late_ms=100, attempts=1)
    assert (await store.claim(newer)).won  # sweeps the skip record: it is past keep_until
    assert await testing.floor(env.raw, env.prefix, "job") == old.slot, "a skip is a run (L11)"
    forgotten = await store.claim(env.request("job", old.slot, skip_reason=COALESCED))
    assert forgotten.outcome is Outcome.LATE and forgotten.reason.startswith("forgotten")
    assert await testing.raw_run(env.raw, env.prefix, "job", old.slot) is None
    # 2. late beats a skip reason: the late text is recorded
    slot = await env.slot()
    late = env.request("late", slot - 10_000, max_late_ms=1000, skip_reason=COALESCED)
    claim = await store.claim(late)
    assert claim.outcome is Outcome.SKIPPED and claim.skip_kind == "late", claim
    # 3. a skip reason beats overlap
    assert (await store.claim(env.request("busy", slot - 1000))).won
    request = env.request("busy", slot, overlap=Overlap.SKIP, skip_reason=COALESCED)
    assert (await store.claim(request)).reason == COALESCED
    # 4. overlap, naming the slot holding the lease
    overlap = await store.claim(env.request("busy", slot + 1000, overlap=Overlap.SKIP))
    assert overlap.reason == overlap_reason(slot - 1000)
    kinds = {r.slot: r.error for r in await store.history("busy")}
    assert kinds == {slot - 1000: None, slot: COALESCED, slot + 1000: overlap.reason}


async def test_S1_lease_skip_reason_for_a_slot_with_a_run_answers_as_without_it(
    env: Env,
) -> None:
    store = await env.lease_store()
    slot = await env.slot()
    first = env.request("job", slot)
    assert (await store.claim(first)).won
    rival = await store.claim(env.request("job", slot, skip_reason=COALESCED))
    assert rival.outcome is Outcome.RUNNING and rival.token == first.token
    run = await testing.raw_run(env.raw, env.prefix, "job", slot)
    assert run is not None and run.status is RunStatus.RUNNING and run.token == first.token


async def test_S1_lease_late_text_equals_the_python_helper(env: Env) -> None:
    store = await env.lease_store()
    slot = await env.slot() - 7_000
    request = env.request("job", slot, max_late_ms=2_000)
    claim = await store.claim(request)
    run = await testing.raw_run(env.raw, env.prefix, "job", slot)
    assert run is not None and run.claimed_at is not None
    assert claim.reason == late_reason(request, run.claimed_at, None) == run.error


async def test_C2_finish_resent_is_true_and_writes_nothing(env: Env) -> None:
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
    # another status, or another token: fenced, nothing written
    assert not await store.finish("job", slot, request.token, RunStatus.SUCCEEDED)
    assert not await store.finish("job", slot, "f" * 32, RunStatus.FAILED)
    assert await testing.raw_run(env.raw, env.prefix, "job", slot) == before
    with pytest.raises(ValueError, match="succeeded, failed or interrupted"):
        await store.finish("job", slot, request.token, RunStatus.SKIPPED)
    with pytest.raises(ValueError, match="succeeded, failed or interrupted"):
        await store.finish("job", slot, request.token, RunStatus.RUNNING)


async def test_C2_finish_resent_after_L5_interrupted_by_another(env: Env) -> None:
    """A run marked interrupted (L5) keeps the last attempt's token: its holder's late finish
    with another status is fenced."""
    store = await env.lease_store()
    slot = await env.slot()
    request = env.request("job", slot, attempts=1)
    assert (await store.claim(request)).won
    await testing.force_expire(env.raw, env.prefix, "job", slot)
    assert (await store.claim(env.request("job", slot, attempts=1))).outcome is Outcome.DONE
    assert not await store.finish("job", slot, request.token, RunStatus.SUCCEEDED)


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
async def test_C5_chaos_early_claims_never_win_a_slot_twice(
    env_on: EnvFactory, server: str, strategy: str, window: dict[str, int]
) -> None:
    """The chaos finding: with a 2 s window counted from the write, claims of a slot 6 s ahead
    made at -6 s, -3.5 s and +0.5 s each found no entry (the first was out of the window) and
    each won. Claims the store could forget before slot + max_late are refused now, and the
    slot has one winner: the claim made within the window before the slot."""
    env = await env_on(server)
    store = await env.store(strategy, **window)
    max_late = 1_000  # the store can take a claim at most 2 s - 1 s = 1 s before the slot
    slot = await env.now() + 6_000
    keys = JobKeys(env.prefix, "job")
    won = []

    async def claim_at(offset: int) -> list[Any]:
        await _until(env, slot + offset)
        answers = []
        for instance in ("a:1:aaaa", "b:2:bbbb"):
            request = env.request("job", slot, instance=instance, max_late_ms=max_late)
            try:
                claim = await store.claim(request)
            except ConfigError as exc:
                answers.append(exc)
                continue
            answers.append(claim.outcome)
            if claim.won:
                won.append(request.token)
        return answers

    early = [*await claim_at(-6_000), *await claim_at(-3_500)]
    written_early = await env.raw.xrange(keys.claims)
    answers = [early, await claim_at(-900), await claim_at(500)]
    assert len(won) == 1, f"C1: {len(won)} winners ({answers})"
    assert all(isinstance(a, ConfigError) for a in early), answers
    assert not written_early, "refused before anything was written"
    assert answers[1:] == [[Outcome.WON, Outcome.LOST], [Outcome.LOST, Outcome.LOST]]


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
