"""Pause and trigger through the store (rules P1 and X1) on the strategies whose claim script
keeps them, lease and script: the pause read in the claim script's own call, the trigger list
of the prefix, their reads on a read-only store, damaged keys, and P1 under a race of OS
processes. stream-id and idmp offer neither."""

from __future__ import annotations

import asyncio
from typing import TYPE_CHECKING, Any

import pytest

import anarchon
from anarchon import (
    ClaimStore,
    ConfigError,
    LeaseStore,
    Outcome,
    RunStatus,
    StoreCorrupt,
    SupportsClaimMany,
    SupportsPause,
    SupportsTrigger,
)
from anarchon.backend import is_triggered_slot
from anarchon_redis import JobKeys
from anarchon_redis._control import TRIGGER_KEEP_MS
from anarchon_redis._keys import PrefixKeys
from anarchon_test_support import finish, go, race_processes, race_spec, wait_ready

if TYPE_CHECKING:
    from conftest import Env

CONTROLLED = ["lease", "script"]
REASON = "deploy freeze: 50% done, naïve é"


async def controlled(env: Env, strategy: str, **options: Any) -> Any:
    """A store of `strategy` that pauses and triggers (typed loosely: it is both protocols)."""
    store = await env.store(strategy, **options)
    assert isinstance(store, SupportsPause) and isinstance(store, SupportsTrigger)
    assert store.capabilities.pause and store.capabilities.trigger
    return store


@pytest.mark.parametrize(
    ("strategy", "controlled"),
    [("lease", True), ("script", True), ("stream-id", False), ("idmp", False)],
)
def test_which_strategies_pause_and_trigger(strategy: str, controlled: bool) -> None:
    """Built, not opened: no server needed. stream-id and idmp claim with a bare XADD."""
    store = anarchon.create_store(f"redis://127.0.0.1:6379/0?strategy={strategy}")
    assert store.capabilities.pause is store.capabilities.trigger is controlled
    assert isinstance(store, SupportsPause) is isinstance(store, SupportsTrigger) is controlled


@pytest.mark.parametrize("strategy", CONTROLLED)
async def test_P1_a_paused_jobs_new_slot_is_recorded_skipped(env: Env, strategy: str) -> None:
    store = await controlled(env, strategy)
    pause = await store.pause("job", reason=REASON, by="ops@host")
    assert (pause.job, pause.until_ms, pause.reason, pause.by) == ("job", None, REASON, "ops@host")
    assert abs(pause.since_ms - await env.now()) < 5000
    assert await store.pauses() == [pause]
    slot = await env.slot()
    # whatever the request says: a caller's own skip reason is overruled by the pause
    first = env.request("job", slot, skip_reason="coalesced: a newer slot ran")
    answer = await store.claim(first)
    assert answer.outcome is Outcome.SKIPPED and answer.reason == f"paused: {REASON}"
    again = await store.claim(env.request("job", slot, instance="other:2:bbbb"))
    assert again.outcome is Outcome.SKIPPED and again.reason == f"paused: {REASON}"
    assert (again.token, again.holder) == (first.token, first.instance)
    [record] = await store.history("job")
    assert record.status is RunStatus.SKIPPED and record.error == f"paused: {REASON}"
    assert record.slot == slot and record.token == first.token
    # claim_many keeps P1 too; a job that is not paused is claimed as ever
    assert isinstance(store, SupportsClaimMany)
    batch = await store.claim_many(
        [env.request("job", slot + 1000), env.request("free", slot + 1000)]
    )
    assert [c.outcome for c in batch] == [Outcome.SKIPPED, Outcome.WON]
    assert batch[0].reason == f"paused: {REASON}"


@pytest.mark.parametrize("strategy", CONTROLLED)
async def test_P1_pause_without_reason_resume_and_replace(env: Env, strategy: str) -> None:
    store = await controlled(env, strategy)
    slot = await env.slot()
    assert not await store.resume("job")  # never paused
    await store.pause("job", reason="first")
    second = await store.pause("job")  # replaces the first, reason and all
    assert await store.pauses() == [second] and second.reason == ""
    answer = await store.claim(env.request("job", slot))
    assert answer.outcome is Outcome.SKIPPED and answer.reason == "paused"
    assert await store.resume("job")
    assert not await store.resume("job")
    assert await store.pauses() == []
    assert not await env.raw.exists(JobKeys(env.prefix, "job").pause)
    # a slot already decided stays decided; a new one is won again
    assert (await store.claim(env.request("job", slot))).outcome is Outcome.SKIPPED
    assert (await store.claim(env.request("job", slot + 1000))).won


@pytest.mark.parametrize("strategy", CONTROLLED)
async def test_P1_a_pause_ends_by_itself_at_until_by_redis_time(env: Env, strategy: str) -> None:
    store = await controlled(env, strategy)
    await store.pause("gone", until_ms=await env.now() - 1)  # already over: inactive
    assert await store.pauses() == []
    assert not await store.resume("gone")
    pause = await store.pause("job", until_ms=await env.now() + 60_000)
    assert await store.pauses() == [pause]
    slot = await env.slot()
    assert (await store.claim(env.request("job", slot))).outcome is Outcome.SKIPPED
    # a minute later, without waiting for it: its until moved into the past by Redis TIME
    await env.raw.hset(JobKeys(env.prefix, "job").pause, "until", str(await env.now() - 1))
    assert await store.pauses() == []
    assert (await store.claim(env.request("job", slot + 1000))).won


async def test_P1_runs_made_before_the_pause_go_on(env: Env) -> None:
    store = await controlled(env, "lease")
    assert isinstance(store, LeaseStore)
    slot = await env.slot()
    mine = env.request("job", slot, lease_ms=60_000)
    assert (await store.claim(mine)).won
    await store.pause("job", reason=REASON)
    rival = await store.claim(env.request("job", slot, instance="other:2:bbbb"))
    assert rival.outcome is Outcome.RUNNING  # not skipped: the run exists
    assert (await store.claim(mine)).won  # C2: the holder's resent claim
    assert await store.renew("job", slot, mine.token, 60_000)
    assert (await store.check(env.request("job", slot))).outcome is Outcome.RUNNING
    assert await store.finish("job", slot, mine.token, RunStatus.SUCCEEDED)
    [record] = await store.history("job")
    assert record.status is RunStatus.SUCCEEDED


async def test_P1_a_late_slot_of_a_paused_job_is_recorded_late(env: Env) -> None:
    store = await controlled(env, "lease")
    await store.pause("job")
    slot = await env.slot() - 10_000
    answer = await store.claim(env.request("job", slot, max_late_ms=1000))
    assert answer.outcome is Outcome.SKIPPED and (answer.reason or "").startswith("late: ")


async def test_P1_script_a_found_claim_answers_as_before(env: Env) -> None:
    store = await controlled(env, "script")
    slot = await env.slot()
    mine = env.request("job", slot)
    assert (await store.claim(mine)).won
    await store.pause("job")
    assert (await store.claim(mine)).won  # C2
    assert (await store.claim(env.request("job", slot))).outcome is Outcome.LOST


@pytest.mark.parametrize("strategy", CONTROLLED)
async def test_X1_triggers_get_new_ad_hoc_slots_listed_oldest_first(
    env: Env, strategy: str
) -> None:
    store = await controlled(env, strategy)
    before = await env.now()
    many = await asyncio.gather(*(store.trigger("job", reason=f"r{i}") for i in range(40)))
    other = await store.trigger("other", by="opé@host", reason="100% ré-run")
    assert len({t.slot for t in many}) == len(many)  # X1: distinct, even within one ms
    for trigger in [*many, other]:
        assert is_triggered_slot(trigger.slot) and trigger.slot >= trigger.requested_at
        assert before <= trigger.requested_at <= await env.now()
    listed = await store.triggers(before)
    assert sorted(listed, key=lambda t: (t.requested_at, t.slot)) == listed
    assert sorted(listed, key=lambda t: t.slot) == sorted([*many, other], key=lambda t: t.slot)
    assert other in listed and (other.by, other.reason) == ("opé@host", "100% ré-run")
    assert await store.triggers(other.requested_at + 1) == []
    # a triggered slot is claimed as any slot: one winner, in history
    slot = many[0].slot
    assert (await store.claim(env.request("job", slot))).won
    assert not (await store.claim(env.request("job", slot, instance="x:1:cccc"))).won
    assert [r.slot for r in await store.history("job")] == [slot]


async def test_X1_slots_stay_new_when_the_clock_steps_back(env: Env) -> None:
    """The newest slot given to a job's trigger is the floor of the next (a clock that stepped
    back, or many triggers in one ms); past a whole second the slot moves on by 1 ms."""
    store = await controlled(env, "lease")
    ahead = (await env.now()) // 1000 * 1000 + 60_999  # the next would be on a whole second
    await env.raw.hset(PrefixKeys(env.prefix).trigger_slots, "job", str(ahead))
    first = await store.trigger("job")
    assert first.slot == ahead + 2
    assert (await store.trigger("job")).slot == ahead + 3
    assert (await store.trigger("other")).slot < ahead  # per job


async def test_X1_triggers_are_kept_a_day(env: Env) -> None:
    store = await controlled(env, "lease")
    key = PrefixKeys(env.prefix).triggers
    now = await env.now()
    await env.raw.zadd(key, {f"{now - TRIGGER_KEEP_MS - 10} old 0 ": now - TRIGGER_KEEP_MS - 10})
    await env.raw.zadd(key, {f"{now - TRIGGER_KEEP_MS + 60_000} kept 0 ": now - 86_340_000})
    fresh = await store.trigger("job")
    assert [t.job for t in await store.triggers(0)] == ["kept", "job"]
    assert fresh.requested_at >= now


@pytest.mark.parametrize("strategy", CONTROLLED)
async def test_control_input_is_checked(env: Env, strategy: str) -> None:
    store = await controlled(env, strategy)
    for bad in ("two\nlines", "x" * 201):
        with pytest.raises(ConfigError, match="reason must be printable"):
            await store.pause("job", reason=bad)
        with pytest.raises(ConfigError, match="by must be printable"):
            await store.trigger("job", by=bad)
    with pytest.raises(ConfigError, match="job name"):
        await store.pause("no spaces")
    with pytest.raises(ConfigError, match="until_ms"):
        await store.pause("job", until_ms=True)
    assert await store.pauses() == [] and await store.triggers(0) == []


@pytest.mark.parametrize("strategy", CONTROLLED)
async def test_damaged_control_keys_are_named(env: Env, strategy: str) -> None:
    store = await controlled(env, strategy)
    keys = JobKeys(env.prefix, "job")
    slot = await env.slot()
    await env.raw.set(keys.pause, "not a hash")
    with pytest.raises(StoreCorrupt, match=rf"{keys.pause}.*is a string"):
        await store.claim(env.request("job", slot))
    with pytest.raises(StoreCorrupt, match=keys.pause):
        await store.pauses()
    await env.raw.delete(keys.pause)
    await env.raw.hset(keys.pause, mapping={"since": "1", "until": "soon", "reason": "", "by": ""})
    with pytest.raises(StoreCorrupt, match=rf"{keys.pause} field until"):
        await store.claim(env.request("job", slot))
    with pytest.raises(StoreCorrupt, match=keys.pause):
        await store.pauses()
    assert await store.resume("job")  # resume clears it
    assert (await store.claim(env.request("job", slot))).won
    triggers = PrefixKeys(env.prefix).triggers
    await env.raw.zadd(triggers, {"nonsense": 1})
    with pytest.raises(StoreCorrupt, match=rf"{triggers}.*'nonsense'"):
        await store.triggers(0)
    await env.raw.delete(triggers)
    await env.raw.set(triggers, "x")
    with pytest.raises(StoreCorrupt, match=f"key {triggers}"):
        await store.trigger("job")


@pytest.mark.parametrize("strategy", CONTROLLED)
async def test_R1_pauses_and_triggers_on_a_read_only_store(env: Env, strategy: str) -> None:
    writer = await controlled(env, strategy)
    slot = await env.slot()
    assert (await writer.claim(env.request("job", slot))).won
    async with anarchon.connect(
        env.url, read_only=True, strategy=strategy, prefix=env.prefix
    ) as reader:
        assert isinstance(reader, SupportsPause) and isinstance(reader, SupportsTrigger)
        assert await reader.pauses() == [] and await reader.triggers(0) == []
        pause = await writer.pause("job", reason=REASON)
        trigger = await writer.trigger("job")
        keys = sorted([k async for k in env.raw.scan_iter(match=f"{{{env.prefix}:*")])
        assert await reader.pauses() == [pause]
        assert await reader.triggers(0) == [trigger]
        with pytest.raises(RuntimeError, match="opened read-only"):
            await reader.pause("job")
        with pytest.raises(RuntimeError, match="opened read-only"):
            await reader.resume("job")
        with pytest.raises(RuntimeError, match="opened read-only"):
            await reader.trigger("job")
        assert sorted([k async for k in env.raw.scan_iter(match=f"{{{env.prefix}:*")]) == keys


async def race(
    env: Env, strategy: str, slots: list[int], tasks: int, *, during: Any = None
) -> list[Any]:
    spec = race_spec(
        env.url,
        slots,
        tasks,
        options={"strategy": strategy, "prefix": env.prefix},
        request={"max_late_ms": 120_000, "overlap": "allow"},
    )
    with race_processes(spec, 4) as procs:
        await asyncio.to_thread(wait_ready, procs)
        go(procs)
        if during is not None:
            await during()
        return await asyncio.to_thread(lambda: [r for p in procs for r in finish(p)])


@pytest.mark.processes
@pytest.mark.parametrize("strategy", CONTROLLED)
async def test_P1_race_of_processes_on_a_paused_job(env: Env, strategy: str) -> None:
    """4 processes x 16 tasks claim the same 200 slots of a paused job: none wins, and each slot
    has exactly one record, the skip of the claim that decided it, which every claim answers."""
    store = await controlled(env, strategy)
    await store.pause("race", reason=REASON)
    now = await env.now()
    slots = [now - 30_000 + n for n in range(200)]
    results = await race(env, strategy, slots, 16)
    assert len(results) == 4 * 16 * len(slots)
    decided: dict[int, set[str]] = {}
    for slot, _token, outcome, reason in results:
        assert (outcome, reason) == ("skipped", f"paused: {REASON}"), (slot, outcome, reason)
    history = await store.history("race", limit=1000)
    assert sorted(r.slot for r in history) == slots
    for record in history:
        assert record.status is RunStatus.SKIPPED and record.error == f"paused: {REASON}"
        decided.setdefault(record.slot, set()).add(record.token)
    tokens = {token for _slot, token, _outcome, _reason in results}
    assert all(len(t) == 1 and t <= tokens for t in decided.values())


async def by_slot(store: ClaimStore, job: str) -> dict[int, Any]:
    return {r.slot: r for r in await store.history(job, limit=5000)}


@pytest.mark.processes
@pytest.mark.parametrize("strategy", CONTROLLED)
async def test_P1_pause_written_during_a_race(env: Env, strategy: str) -> None:
    """A pause written while 4 processes claim 1,000 slots in order: every slot ends with one
    record; those decided before the pause (by Redis TIME) were won, those after it skipped
    ``paused``: the claim script read the pause in its own atomic step."""
    store = await controlled(env, strategy)
    now = await env.now()
    slots = [now - 30_000 + n for n in range(1000)]
    paused: list[Any] = []

    async def pause_midway() -> None:
        """Pause once 100 slots are decided (a bounded poll)."""
        deadline = asyncio.get_running_loop().time() + 60
        while len(await store.history("race", limit=5000)) < 100:
            assert asyncio.get_running_loop().time() < deadline, "the race decided no slots"
            await asyncio.sleep(0.01)
        paused.append(await store.pause("race"))

    tasks = 8 if strategy == "script" else 16
    results = await race(env, strategy, slots, tasks, during=pause_midway)
    [pause] = paused
    records = await by_slot(store, "race")
    assert sorted(records) == slots
    outcomes = {outcome for _s, _t, outcome, _r in results}
    assert outcomes <= {"won", "lost", "running", "skipped"}
    won = skipped = 0
    for record in records.values():
        if record.status is RunStatus.SKIPPED:
            skipped += 1
            assert record.error == "paused" and record.claimed_at >= pause.since_ms, record
        else:
            won += 1
            assert record.claimed_at <= pause.since_ms, record
    assert won >= 100 and skipped > 0, (won, skipped)
    for slot, _token, outcome, reason in results:
        if outcome == "skipped":
            assert reason == "paused" and records[slot].status is RunStatus.SKIPPED
