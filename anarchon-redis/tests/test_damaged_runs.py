"""strategy=lease with damaged data, written with raw Redis commands and the `testing` backdoor
behind the store's back (issue 21, finding 6): `history` returns the runs it can read and names
each bad one by its key; ``anarchon history`` and ``anarchon status`` show them; a corrupt floor
makes a scheduler not ready, naming the error, until a claim of the job succeeds again, while the
other jobs of the same batch keep running."""

from __future__ import annotations

import asyncio
import json
import time
from collections.abc import Callable
from typing import TYPE_CHECKING

import pytest
import redis.asyncio as aioredis
from click.testing import CliRunner, Result

import anarchon
from anarchon import LeaseStore, Outcome, Run, Scheduler, StoreCorrupt
from anarchon.cli import EXIT_STORE_CORRUPT, cli
from anarchon_redis import JobKeys, testing

if TYPE_CHECKING:
    from conftest import Env

SLOT = 1_800_000_000_000
SLOTS = [SLOT + i * 1000 for i in range(5)]


async def filled(env: Env) -> LeaseStore:
    """A store whose job ``j`` has a skip record at each of `SLOTS`, newest last."""
    store = await env.lease_store()
    for slot in SLOTS:
        request = env.request("j", slot, max_late_ms=10**12, skip_reason="paused: test")
        assert (await store.claim(request)).outcome is Outcome.SKIPPED
    return store


async def damage(env: Env, kind: str) -> tuple[str, str, int | None]:
    """Damage the run at SLOTS[2] (or add one); the damaged key, what names the problem, and
    the slot the damaged run is reported at."""
    keys = JobKeys(env.prefix, "j")
    if kind == "text-slot":
        good = await env.raw.hget(keys.runs, str(SLOTS[1]))
        await env.raw.hset(keys.runs, "abc", good)
        await env.raw.zadd(keys.slots, {"abc": SLOTS[2] + 500})
        return f"{keys.slots} member 'abc'", "has member 'abc'", None
    if kind == "negative-attempt":
        await testing.set_run_field(env.raw, env.prefix, "j", SLOTS[2], "attempt", -1)
        return f"{keys.runs} field {SLOTS[2]}", "has attempt '-1'", SLOTS[2]
    if kind == "bad-status":
        await testing.set_run_field(env.raw, env.prefix, "j", SLOTS[2], "status", "bogus")
        return f"{keys.runs} field {SLOTS[2]}", "has status 'bogus'", SLOTS[2]
    if kind == "huge-number":
        await testing.set_run_field(env.raw, env.prefix, "j", SLOTS[2], "claimed_at", "9" * 5000)
        return f"{keys.runs} field {SLOTS[2]}", "has claimed_at '99999", SLOTS[2]
    if kind == "not-utf8":
        raw = aioredis.Redis.from_url(env.url)  # bytes in, bytes out
        try:
            value = await raw.hget(keys.runs, str(SLOTS[2]))
            await raw.hset(keys.runs, str(SLOTS[2]), value + b"|\xff\xfe")
        finally:
            await raw.aclose()
        return f"{keys.runs} field {SLOTS[2]}", "bytes that are not UTF-8", SLOTS[2]
    assert kind == "not-a-run"
    await env.raw.hset(keys.runs, str(SLOTS[2]), "hello")
    return f"{keys.runs} field {SLOTS[2]}", "ends after 1 of its 9 parts", SLOTS[2]


KINDS = ["text-slot", "negative-attempt", "bad-status", "huge-number", "not-a-run", "not-utf8"]


@pytest.mark.parametrize("kind", KINDS)
async def test_history_returns_the_good_runs_and_names_the_bad_one(env: Env, kind: str) -> None:
    store = await filled(env)
    key, named, slot = await damage(env, kind)
    with pytest.raises(StoreCorrupt) as caught:
        await store.history("j", 10)
    error = caught.value
    assert isinstance(error, anarchon.DamagedHistory), error
    good = [s for s in SLOTS if kind == "text-slot" or s != SLOTS[2]]
    assert [r.slot for r in error.records] == good[::-1]
    (bad,) = error.damaged
    assert (bad.key, bad.slot) == (key, slot)
    assert named in bad.problem, bad.problem
    assert len(bad.problem) < 600


# (The claim script does not read claimed_at, so a huge one only breaks reading the run back.)
@pytest.mark.parametrize("kind", ["negative-attempt", "bad-status", "not-a-run", "not-utf8"])
async def test_a_claim_or_check_of_a_damaged_run_is_corrupt(env: Env, kind: str) -> None:
    """Never a raw driver error (invalid UTF-8 was a UnicodeDecodeError)."""
    store = await filled(env)
    await damage(env, kind)
    request = env.request("j", SLOTS[2], max_late_ms=10**12)
    for call in (store.claim, store.check):
        with pytest.raises(StoreCorrupt) as caught:
            await call(request)
        assert len(str(caught.value)) < 600
    # The other runs are untouched and still answer.
    other = await store.claim(env.request("j", SLOTS[1], max_late_ms=10**12))
    assert other.outcome is Outcome.SKIPPED


@pytest.mark.parametrize("kind", ["text-slot", "negative-attempt", "bad-status"])
async def test_cli_history_and_status_show_the_good_runs_and_the_bad_one(
    env: Env, kind: str
) -> None:
    await filled(env)
    _, named, slot = await damage(env, kind)
    url = f"{env.url}?prefix={env.prefix}"

    def run_cli() -> tuple[Result, Result, Result]:
        return (
            invoke("history", url, "j"),
            invoke("history", url, "j", "--json"),
            invoke("status", url, "--job", "j", "--json"),
        )

    table, as_json, status = await asyncio.to_thread(run_cli)
    assert table.exit_code == EXIT_STORE_CORRUPT, table.output
    assert table.stdout.count("paused: test") == 4 + (kind == "text-slot")
    assert "damaged" in table.stdout and named in table.stderr
    entries = json.loads(as_json.stdout)
    (bad,) = [e for e in entries if e["status"] == "damaged"]
    assert named in bad["error"] and bad["slot_ms"] == slot
    assert status.exit_code == EXIT_STORE_CORRUPT, status.output
    (job,) = json.loads(status.stdout)["jobs"]
    assert sum(job["counts"].values()) == 4 + (kind == "text-slot")
    assert named in job["damaged"][0]["error"]


async def test_a_corrupt_floor_makes_the_scheduler_not_ready_until_a_claim_succeeds(
    env: Env,
) -> None:
    store = await env.lease_store()
    s = Scheduler(store, instance="a", environ={})
    ran: dict[str, list[int]] = {"tick": [], "tock": []}
    for name, slots in ran.items():

        @s.job("* * * * * *", name=name, max_late="500ms")
        def job(run: Run, slots: list[int] = slots) -> None:
            slots.append(run.slot)

    async with s:
        await eventually(lambda: bool(ran["tick"]) and s.health().ready)
        await env.raw.hset(JobKeys(env.prefix, "tick").runs, "floor", "bad")
        await eventually(lambda: not s.health().ready)
        health = s.health()
        assert health.store_reachable
        assert list(health.damaged_jobs) == ["tick"]
        assert "field floor" in health.damaged_jobs["tick"]
        _, claim = s.last_claims["tick"]
        assert claim.outcome is Outcome.UNKNOWN and "field floor" in claim.reason
        seen = len(ran["tock"])
        await eventually(lambda: len(ran["tock"]) >= seen + 2)  # its batch neighbour runs on
        await env.raw.hset(JobKeys(env.prefix, "tick").runs, "floor", "0")
        await eventually(lambda: s.health().ready)


def invoke(*args: str) -> Result:
    return CliRunner().invoke(cli, list(args), prog_name="anarchon")


async def eventually(condition: Callable[[], bool], timeout: float = 6.0) -> None:
    """Wait until `condition()` holds, failing after `timeout` seconds."""
    deadline = time.monotonic() + timeout
    while not condition():
        if time.monotonic() > deadline:
            pytest.fail(f"timed out after {timeout} s")
        await asyncio.sleep(0.01)


async def test_stream_history_returns_the_claims_and_names_a_foreign_entry(env: Env) -> None:
    """strategy=stream-id: an entry of the claims stream that anarchon did not write."""
    store = await env.store("stream-id")
    slot = await env.slot()
    for s in (slot - 2000, slot - 1000):
        assert (await store.claim(env.request("j", s))).won
    claims = JobKeys(env.prefix, "j").claims
    entry_id = await env.raw.xadd(claims, {"hello": "world"})
    with pytest.raises(StoreCorrupt) as caught:
        await store.history("j", 10)
    error = caught.value
    assert isinstance(error, anarchon.DamagedHistory), error
    assert [r.slot for r in error.records] == [slot - 1000, slot - 2000]
    (bad,) = error.damaged
    assert bad.key == f"{claims} entry {entry_id}" and "not a claim" in bad.problem
