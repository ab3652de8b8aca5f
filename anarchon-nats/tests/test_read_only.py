"""R1 and the job list on NATS, both strategies (issue 26): `jobs()` names the jobs the stream
holds claims of; a store opened read-only creates no stream, and reads with stream info and
message gets only, so a NATS user allowed nothing else reads the history through the real CLI.

The oracle is a raw nats-py client (the full user's) reading the stream's config and state
behind the store's back.
"""

from __future__ import annotations

import asyncio
import json
import random
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import nats
import pytest

from anarchon import ClaimRequest, ConfigError, StoreNotSetUp
from anarchon_nats import NATSStore

from .conftest import NATS_URL, PrivateServer, StoreFactory, delete_stream, require_binary

STRATEGIES = ["msg-id", "expected-seq"]
FULL_PASSWORD = "full-S3cret"
READER_PASSWORD = "reader-S3cret"


def now_ms() -> int:
    return time.time_ns() // 1_000_000


async def claim_slots(store: NATSStore, job: str, slots: list[int]) -> None:
    for slot in slots:
        request = ClaimRequest(job=job, slot=slot, instance="web-1", max_late_ms=300_000)
        assert (await store.claim(request)).won


async def stream_snapshot(name: str, url: str = NATS_URL) -> dict[str, Any] | None:
    """The stream's config and state as the server reports them (None: no such stream)."""
    nc = await nats.connect(url, connect_timeout=2, allow_reconnect=False)
    try:
        answer = await nc.request(f"$JS.API.STREAM.INFO.{name}", b"", timeout=2)
    finally:
        await nc.close()
    info = json.loads(answer.data)
    if "error" in info:
        assert info["error"]["code"] == 404, info
        return None
    return {"config": info["config"], "state": info["state"]}


@pytest.mark.parametrize("strategy", STRATEGIES)
async def test_jobs_lists_the_jobs_with_claims(stores: StoreFactory, strategy: str) -> None:
    store = await stores(strategy=strategy)
    assert await store.jobs() == []
    base = now_ms() // 1000 * 1000
    for job in ("zeta", "alpha", "mid-job_1"):
        await claim_slots(store, job, [base - 2000, base - 1000])
    assert await store.jobs() == ["alpha", "mid-job_1", "zeta"]


async def test_jobs_leave_out_subjects_that_name_no_job(stores: StoreFactory, prefix: str) -> None:
    store = await stores()
    await claim_slots(store, "real", [now_ms() // 1000 * 1000])
    nc = await nats.connect(NATS_URL, connect_timeout=2, allow_reconnect=False)
    try:
        await nc.jetstream().publish(f"{prefix}.not%a%job.claims", b"{}")
    finally:
        await nc.close()
    assert await store.jobs() == ["real"]


@pytest.mark.parametrize("strategy", STRATEGIES)
async def test_R1_read_only_open_of_a_missing_stream_creates_nothing(
    prefix: str, strategy: str
) -> None:
    for _ in range(2):  # the first created nothing, so the second finds nothing either
        store = NATSStore.create(NATS_URL, prefix=prefix, strategy=strategy)
        with pytest.raises(StoreNotSetUp) as caught:
            await store.open_read_only()
        await store.close()
        message = str(caught.value)
        assert f"no stream ANARCHON_{prefix}" in message and "stream option" in message
    assert await stream_snapshot(f"ANARCHON_{prefix}") is None


async def test_R1_read_only_open_names_the_strategy_of_the_stream(
    stores: StoreFactory, prefix: str
) -> None:
    await stores(strategy="expected-seq")
    store = NATSStore.create(NATS_URL, prefix=prefix, strategy="msg-id")
    with pytest.raises(ConfigError, match="strategy=expected-seq"):
        await store.open_read_only()


@pytest.mark.parametrize("strategy", STRATEGIES)
async def test_R1_read_only_store_reads_what_the_scheduler_wrote_and_changes_nothing(
    stores: StoreFactory, prefix: str, strategy: str
) -> None:
    # Windows other than the default: a reader does not have to repeat them.
    writer = await stores(strategy=strategy, max_age_ms="2h", duplicate_window_ms="1h")
    base = now_ms() // 1000 * 1000
    slots = [base - 1000 * i for i in range(60, 0, -1)]
    # Interleaved with another job, so the job's messages are spread over the stream.
    spread = random.Random(26)
    for slot in slots:
        await claim_slots(writer, "j", [slot])
        await claim_slots(writer, "other", [slot - 100 * k for k in range(spread.randrange(4))])
    lost = ClaimRequest(job="j", slot=slots[5], instance="web-2", max_late_ms=300_000)
    assert (await writer.claim(lost)).outcome.value == "lost"
    before = await stream_snapshot(f"ANARCHON_{prefix}")
    reader = NATSStore.create(NATS_URL, prefix=prefix, strategy=strategy)
    await reader.open_read_only()
    try:
        for limit in (0, 1, 7, 60, 500):
            assert await reader.history("j", limit) == await writer.history("j", limit)
        records = await reader.history("j", 500)
        assert [r.slot for r in records] == slots[::-1]
        assert {r.holder for r in records} == {"web-1"}
        assert all(r.claimed_at is not None for r in records)
        assert await reader.jobs() == ["j", "other"] == await writer.jobs()
        assert await reader.history("never-ran", 10) == []
        with pytest.raises(ConfigError, match="opened read-only"):
            await reader.claim(ClaimRequest(job="j", slot=slots[0], instance="reader"))
        with pytest.raises(ConfigError, match="opened read-only"):
            await reader.claim_many([ClaimRequest(job="new", slot=slots[-1], instance="reader")])
    finally:
        await reader.close()
    assert await stream_snapshot(f"ANARCHON_{prefix}") == before


# -- a NATS user allowed only reads ---------------------------------------------------------------
def reader_config(path: Path, stream: str) -> Path:
    """Two users: ``full`` may do anything; ``reader`` may only ask for the stream's info and
    get its messages (the permissions of docs/backends/nats.md, "Read-only monitoring")."""
    config = path / "server.conf"
    config.write_text(
        f"""
accounts {{
  APP {{
    jetstream: enabled
    users: [
      {{user: full, password: "{FULL_PASSWORD}"}}
      {{
        user: info-only
        password: "{READER_PASSWORD}"
        permissions: {{
          publish: {{allow: ["$JS.API.STREAM.INFO.{stream}"]}}
          subscribe: {{allow: ["_INBOX.>"]}}
        }}
      }}
      {{
        user: reader
        password: "{READER_PASSWORD}"
        permissions: {{
          publish: {{allow: ["$JS.API.STREAM.INFO.{stream}", "$JS.API.STREAM.MSG.GET.{stream}"]}}
          subscribe: {{allow: ["_INBOX.>"]}}
        }}
      }}
    ]
  }}
}}
"""
    )
    return config


@pytest.fixture
def reader_server(tmp_path: Path) -> Iterator[PrivateServer]:
    require_binary()
    server = PrivateServer(tmp_path, "-c", str(reader_config(tmp_path, "ANARCHON_ro")))
    server.start()
    yield server
    server.stop()


def cli(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "anarchon.cli", *args],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )


@pytest.mark.processes
@pytest.mark.parametrize("strategy", STRATEGIES)
async def test_R1_a_user_allowed_only_reads_runs_history_and_status(
    reader_server: PrivateServer, strategy: str
) -> None:
    port = reader_server.port
    full = f"nats://full:{FULL_PASSWORD}@127.0.0.1:{port}"
    reader = f"nats://reader:{READER_PASSWORD}@127.0.0.1:{port}?prefix=ro&strategy={strategy}"

    # Nothing there yet: the reader may not create the stream, and is told where it looked.
    store = NATSStore.create(reader, timeout_ms="1s")
    with pytest.raises(StoreNotSetUp, match="no stream ANARCHON_ro"):
        await store.open_read_only()
    await store.close()
    store = NATSStore.create(reader, timeout_ms="1s")
    with pytest.raises(ConfigError, match="permission denied"):
        await store.open()  # a scheduler's open would create it: refused
    await store.close()

    writer = NATSStore.create(full, prefix="ro", strategy=strategy)
    await writer.open()
    base = now_ms() // 1000 * 1000
    try:
        await claim_slots(writer, "report", [base - 3000, base - 2000, base - 1000])
        await claim_slots(writer, "backup", [base - 2000])
        expected = await writer.history("report", 10)
    finally:
        await writer.close()
    before = await stream_snapshot("ANARCHON_ro", full)

    history, status, table = await asyncio.gather(
        asyncio.to_thread(cli, "history", reader, "report", "--json"),
        asyncio.to_thread(cli, "status", reader, "--json", "--once"),
        asyncio.to_thread(cli, "status", reader, "--once"),
    )
    for done in (history, status, table):
        assert done.returncode == 0, done.stderr
        assert READER_PASSWORD not in done.stdout + done.stderr
    assert [e["slot_ms"] for e in json.loads(history.stdout)] == [r.slot for r in expected]
    jobs = {job["job"]: job for job in json.loads(status.stdout)["jobs"]}
    assert sorted(jobs) == ["backup", "report"]
    assert jobs["report"]["counts"] == {"claimed": 3}
    assert "report" in table.stdout and "backup" in table.stdout
    assert await stream_snapshot("ANARCHON_ro", full) == before

    # A user who may not get messages is told so, not that the server is unreachable.
    store = NATSStore.create(reader.replace("reader:", "info-only:"), timeout_ms="1s")
    await store.open_read_only()
    try:
        with pytest.raises(ConfigError, match="permission denied"):
            await store.history("report", 10)
    finally:
        await store.close()


async def test_delete_stream_helper_cleans_up(prefix: str) -> None:
    """The fixture's clean-up reaches streams the tests above create (sanity of the oracle)."""
    store = NATSStore.create(NATS_URL, prefix=prefix)
    await store.open()
    await store.close()
    assert await stream_snapshot(f"ANARCHON_{prefix}") is not None
    await delete_stream(f"ANARCHON_{prefix}")
    assert await stream_snapshot(f"ANARCHON_{prefix}") is None
