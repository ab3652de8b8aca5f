"""Messages that are not anarchon's claims on a job's subjects, published with a raw nats-py client
(issue 21, finding 6): `history` returns the claims it can read and names each foreign message by
its sequence; ``anarchon history`` and ``anarchon status`` show them; a claim whose slot holds a
foreign message makes a scheduler not ready, naming the message, until a claim succeeds again."""

from __future__ import annotations

import asyncio
import json
import time
from collections.abc import Callable

import nats
import pytest
from click.testing import CliRunner, Result

import anarchon
from anarchon import ClaimRequest, Outcome, Run, Scheduler, StoreCorrupt
from anarchon.cli import EXIT_STORE_CORRUPT, cli

from .conftest import NATS_URL, StoreFactory

STRATEGIES = ["msg-id", "expected-seq"]
FOREIGN = [
    pytest.param(b"hello", "not JSON", id="not-json"),
    pytest.param(b'{"job": "j"}', "it needs job, slot, token and instance", id="missing-fields"),
    pytest.param(
        b'{"job": "other", "slot": 5, "token": "ab", "instance": "x"}',
        "holds a claim of job 'other'",
        id="another-job",
    ),
]


def now_ms() -> int:
    return time.time_ns() // 1_000_000


def subject(prefix: str, strategy: str, slot: int) -> str:
    return f"{prefix}.j.claims" if strategy == "msg-id" else f"{prefix}.j.slot.{slot}"


async def publish(prefix: str, strategy: str, slot: int, data: bytes) -> int:
    """Publish `data` on the subject of (j, slot), behind the store's back; its sequence."""
    nc = await nats.connect(NATS_URL, connect_timeout=2, allow_reconnect=False)
    try:
        ack = await nc.jetstream().publish(subject(prefix, strategy, slot), data)
    finally:
        await nc.close()
    return int(ack.seq)


async def claimed(stores: StoreFactory, strategy: str, slots: list[int]) -> None:
    store = await stores(strategy=strategy)
    for slot in slots:
        claim = await store.claim(ClaimRequest(job="j", slot=slot, instance="web-1"))
        assert claim.won, claim


@pytest.mark.parametrize("strategy", STRATEGIES)
@pytest.mark.parametrize(("data", "named"), FOREIGN)
async def test_history_returns_the_claims_and_names_the_foreign_message(
    stores: StoreFactory, prefix: str, strategy: str, data: bytes, named: str
) -> None:
    base = now_ms() // 1000 * 1000
    slots = [base - 3000, base - 2000, base - 1000]
    await claimed(stores, strategy, slots[:2])
    seq = await publish(prefix, strategy, slots[2], data)
    store = await stores(strategy=strategy)
    with pytest.raises(StoreCorrupt) as caught:
        await store.history("j", 10)
    error = caught.value
    assert isinstance(error, anarchon.DamagedHistory), error
    assert [r.slot for r in error.records] == slots[1::-1]
    (bad,) = error.damaged
    assert bad.key == f"message {seq} of stream ANARCHON_{prefix}"
    assert bad.slot == (None if strategy == "msg-id" else slots[2])
    assert named in bad.problem and f"message {seq}" in bad.problem


@pytest.mark.parametrize("strategy", STRATEGIES)
async def test_cli_history_and_status_show_the_claims_and_the_foreign_message(
    stores: StoreFactory, prefix: str, strategy: str
) -> None:
    base = now_ms() // 1000 * 1000
    await claimed(stores, strategy, [base - 3000, base - 2000])
    await publish(prefix, strategy, base - 1000, b"hello")
    url = f"{NATS_URL}?prefix={prefix}&strategy={strategy}"

    def run_cli() -> tuple[Result, Result, Result]:
        return (
            invoke("history", url, "j"),
            invoke("history", url, "j", "--json"),
            invoke("status", url, "--job", "j", "--json"),
        )

    table, as_json, status = await asyncio.to_thread(run_cli)
    assert table.exit_code == EXIT_STORE_CORRUPT, table.output
    assert table.stdout.count("web-1") == 2 and "damaged" in table.stdout
    assert "not JSON" in table.stderr
    entries = json.loads(as_json.stdout)
    assert [e["status"] for e in entries].count("claimed") == 2
    (bad,) = [e for e in entries if e["status"] == "damaged"]
    assert "not JSON" in bad["error"]
    assert status.exit_code == EXIT_STORE_CORRUPT, status.output
    (job,) = json.loads(status.stdout)["jobs"]
    assert job["counts"] == {"claimed": 2} and "not JSON" in job["damaged"][0]["error"]


async def test_a_foreign_message_on_a_slot_makes_the_scheduler_not_ready_until_a_claim_succeeds(
    stores: StoreFactory, prefix: str
) -> None:
    """expected-seq: the claim of a slot whose subject already holds a foreign message reads
    it back, and cannot: StoreCorrupt. The next slot is claimed and the instance is ready."""
    store = await stores(strategy="expected-seq")
    s = Scheduler(store, instance="a", environ={})
    ran: list[int] = []

    @s.job("* * * * * *", name="j", max_late="500ms")
    def job(run: Run) -> None:
        ran.append(run.slot)

    async with s:
        await eventually(lambda: bool(ran) and s.health().ready)
        ahead = ran[-1] + 2000
        for slot in (ahead, ahead + 1000):
            await publish(prefix, "expected-seq", slot, b"hello")
        await eventually(lambda: not s.health().ready)
        health = s.health()
        assert health.store_reachable and "not JSON" in health.damaged_jobs["j"]
        _, claim = s.last_claims["j"]
        assert claim.outcome is Outcome.UNKNOWN and "not JSON" in claim.reason
        await eventually(lambda: s.health().ready)
        assert ahead not in ran and ahead + 1000 not in ran
        await eventually(lambda: ran[-1] > ahead + 1000)


def invoke(*args: str) -> Result:
    return CliRunner().invoke(cli, list(args), prog_name="anarchon")


async def eventually(condition: Callable[[], bool], timeout: float = 8.0) -> None:
    """Wait until `condition()` holds, failing after `timeout` seconds."""
    deadline = time.monotonic() + timeout
    while not condition():
        if time.monotonic() > deadline:
            pytest.fail(f"timed out after {timeout} s")
        await asyncio.sleep(0.01)
