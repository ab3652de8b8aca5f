"""Observability in core: health() and its HTTP endpoint, log records, a raising observer,
listing jobs, and the `status` / `history` commands on SQLite."""

from __future__ import annotations

import asyncio
import json
import logging
from collections.abc import Iterator
from pathlib import Path

import pytest
from click.testing import CliRunner

from anarchon import (
    ClaimRequest,
    MemoryStore,
    Outcome,
    Run,
    RunStatus,
    Scheduler,
    SupportsJobList,
    hookimpl,
)
from anarchon.cli import cli
from anarchon.plugins import StartedScheduler, plugin_manager
from anarchon_sqlite import SQLiteStore
from anarchon_test_support import eventually


def scheduler(store: MemoryStore, name: str, **kwargs: object) -> Scheduler:
    return Scheduler(store, instance=name, environ={}, **kwargs)  # type: ignore[arg-type]


async def http_get(port: int, path: str) -> tuple[int, dict[str, object]]:
    reader, writer = await asyncio.open_connection("127.0.0.1", port)
    writer.write(f"GET {path} HTTP/1.1\r\nHost: x\r\n\r\n".encode())
    await writer.drain()
    data = await reader.read()
    writer.close()
    head, _, body = data.partition(b"\r\n\r\n")
    return int(head.split()[1]), json.loads(body)


async def test_health_reports_store_clock_running_jobs_and_last_claims() -> None:
    s = scheduler(MemoryStore.create(), "a")
    release = asyncio.Event()

    @s.job("* * * * * *", name="tick", max_late="500ms")
    async def tick() -> None:
        await release.wait()

    before = s.health()
    assert not before.started and not before.ready and before.started_at is None
    async with s:
        await eventually(lambda: bool(s.health().running), 5, "a running job")
        health = s.health()
        assert health.ready and health.store_reachable and health.started_at
        assert health.clock_round_trip_ms is not None
        assert health.running[0].job == "tick" and health.running[0].attempt == 1
        last = health.last_claims["tick"]
        assert last.outcome is Outcome.WON and last.attempt == 1 and last.holder == "a"
        data = health.to_dict()
        assert data["last_claims"]["tick"]["outcome"] == "won"
        assert data["ready"] is True
        json.dumps(data)
        release.set()
    assert not s.health().started


async def test_health_endpoint_answers_liveness_and_readiness() -> None:
    s = scheduler(MemoryStore.create(), "a")

    @s.job("0 0 1 1 *")
    def yearly() -> None: ...

    server = await s.serve_health(port=0, host="127.0.0.1")
    code, body = await http_get(server.port, "/readyz")
    assert (code, body["ready"]) == (503, False)
    async with s:
        code, body = await http_get(server.port, "/healthz")
        assert (code, body["live"], body["started"]) == (200, True, True)
        code, body = await http_get(server.port, "/readyz")
        assert (code, body["ready"], body["instance"]) == (200, True, "a")
        s.store_health.failed("claim", ConnectionError("gone"))
        code, body = await http_get(server.port, "/readyz")
        assert code == 503 and body["store_reachable"] is False
        assert (await http_get(server.port, "/healthz"))[0] == 200
        assert (await http_get(server.port, "/nope"))[0] == 404


async def test_health_port_setting_serves_while_started(unused_tcp_port: int) -> None:
    s = scheduler(MemoryStore.create(), "a", health_port=unused_tcp_port)

    @s.job("0 0 1 1 *")
    def yearly() -> None: ...

    async with s:
        assert (await http_get(unused_tcp_port, "/readyz"))[0] == 200
    with pytest.raises(OSError):
        await http_get(unused_tcp_port, "/readyz")


@pytest.fixture
def unused_tcp_port() -> int:
    import socket

    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


class Raising:
    @hookimpl
    def anarchon_claim_decided(self) -> None:
        raise RuntimeError("observer bug")

    @hookimpl
    def anarchon_run_started(self) -> None:
        raise RuntimeError("observer bug")

    @hookimpl
    def anarchon_scheduler_started(self) -> None:
        raise RuntimeError("observer bug")


@pytest.fixture
def raising() -> Iterator[Raising]:
    plugin = Raising()
    plugin_manager().register(plugin)
    yield plugin
    plugin_manager().unregister(plugin)


@pytest.mark.slow
async def test_a_plugin_that_raises_does_not_disturb_claims(
    raising: Raising, caplog: pytest.LogCaptureFixture
) -> None:
    store = MemoryStore.create("raising")
    runs: list[int] = []
    instances = [scheduler(store, name) for name in ("a", "b")]
    for s in instances:

        @s.job("* * * * * *", name="tick", max_late="500ms")
        def tick(run: Run) -> None:
            runs.append(run.slot)

    async with instances[0], instances[1]:
        await eventually(lambda: len(runs) >= 2, 10, "two runs")
    assert len(runs) == len(set(runs))
    assert "raised in anarchon_claim_decided; ignored" in caplog.text


async def test_log_records_carry_the_structured_fields(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    url = f"sqlite:///{tmp_path}/x.db?prefix=app"
    s = Scheduler(url, instance="a", environ={})
    done = asyncio.Event()

    @s.job("* * * * * *", name="tick", max_late="500ms")
    def tick() -> None:
        done.set()

    caplog.set_level(logging.DEBUG, logger="anarchon")
    async with s:
        await asyncio.wait_for(done.wait(), 5)
        await eventually(lambda: any(hasattr(r, "duration_ms") for r in caplog.records), 5)
    claim = next(r for r in caplog.records if r.name == "anarchon.store" and "claim" in r.msg)
    assert claim.levelno == logging.INFO
    for field in ("job", "slot", "outcome", "attempt", "instance", "latency_ms"):
        assert hasattr(claim, field), field
    finished = next(r for r in caplog.records if hasattr(r, "duration_ms"))
    assert finished.status == "succeeded"  # type: ignore[attr-defined]
    assert finished.duration_ms >= 0  # type: ignore[attr-defined]
    assert finished.instance == "a"  # type: ignore[attr-defined]


async def test_only_won_claims_log_at_info(caplog: pytest.LogCaptureFixture) -> None:
    store = MemoryStore.create("quiet")
    instances = [scheduler(store, name) for name in ("a", "b")]
    ran = asyncio.Event()
    for s in instances:

        @s.job("* * * * * *", name="tick", max_late="500ms")
        def tick() -> None:
            ran.set()

    caplog.set_level(logging.DEBUG, logger="anarchon.store")
    async with instances[0], instances[1]:
        await asyncio.wait_for(ran.wait(), 5)
        await eventually(
            lambda: sum(1 for r in caplog.records if getattr(r, "outcome", "")) >= 2, 5
        )
    for record in caplog.records:
        outcome = getattr(record, "outcome", None)
        if outcome is not None:
            assert (record.levelno == logging.INFO) == (outcome == "won"), record.getMessage()


async def test_a_store_error_with_a_password_is_redacted(
    caplog: pytest.LogCaptureFixture,
) -> None:
    s = scheduler(MemoryStore.create(), "a")
    s.store_health.failed(
        "claim", ConnectionError("cannot reach postgresql://app:hunter2@db:5432/app")
    )
    assert "hunter2" not in caplog.text
    assert "hunter2" not in (s.health().last_error or "")
    assert "hunter2" not in json.dumps(s.health().to_dict())


async def test_memory_and_sqlite_list_their_jobs(tmp_path: Path) -> None:
    memory = MemoryStore.create("jobs-list")
    sqlite = SQLiteStore.create(tmp_path / "j.db")
    await sqlite.open()
    other_prefix = MemoryStore.create("jobs-list", prefix="other")
    try:
        for store in (memory, sqlite):
            assert isinstance(store, SupportsJobList)
            assert await store.jobs() == []
            for job in ("b", "a"):
                await store.claim(
                    ClaimRequest(job=job, slot=1000, instance="x", max_late_ms=10**13)
                )
            assert await store.jobs() == ["a", "b"]
        assert await other_prefix.jobs() == []
    finally:
        await sqlite.close()


def run_cli(*args: str) -> tuple[int, str]:
    result = CliRunner().invoke(cli, list(args), prog_name="anarchon")
    return result.exit_code, result.output


async def fill(path: Path) -> None:
    store = SQLiteStore.create(path)
    await store.open()
    try:
        for job in ("alpha", "beta"):
            for slot in (1000, 2000, 3000):
                request = ClaimRequest(job=job, slot=slot, instance="web-1", max_late_ms=10**13)
                claim = await store.claim(request)
                assert claim.won
                if slot == 1000:
                    await store.finish(job, slot, request.token, RunStatus.FAILED, "boom")
                elif slot == 2000:
                    await store.finish(job, slot, request.token, RunStatus.SUCCEEDED)
    finally:
        await store.close()


async def test_status_json_on_a_live_sqlite_store(tmp_path: Path) -> None:
    path = tmp_path / "s.db"
    await fill(path)
    code, out = await asyncio.to_thread(run_cli, "status", f"sqlite:///{path}", "--json")
    assert code == 0, out
    data = json.loads(out)
    assert [j["job"] for j in data["jobs"]] == ["alpha", "beta"]
    alpha = data["jobs"][0]
    assert alpha["counts"] == {"failed": 1, "running": 1, "succeeded": 1}
    latest = alpha["latest"][0]
    assert (latest["slot_ms"], latest["status"], latest["winner"]) == (3000, "running", "web-1")
    assert 0 < latest["lease_remaining_ms"] <= 60_000
    code, out = await asyncio.to_thread(
        run_cli, "status", f"sqlite:///{path}", "--once", "--job", "beta"
    )
    assert code == 0 and "beta" in out and "alpha" not in out and "web-1" in out


async def test_history_filters(tmp_path: Path) -> None:
    path = tmp_path / "h.db"
    await fill(path)
    url = f"sqlite:///{path}"
    code, out = await asyncio.to_thread(
        run_cli, "history", url, "alpha", "--status", "failed", "--json"
    )
    assert code == 0, out
    assert [r["slot_ms"] for r in json.loads(out)] == [1000]
    code, out = await asyncio.to_thread(
        run_cli, "history", url, "alpha", "--since", "1970-01-01T00:00:02Z", "--json"
    )
    assert [r["slot_ms"] for r in json.loads(out)] == [3000, 2000]
    code, out = await asyncio.to_thread(run_cli, "history", url, "alpha", "--since", "1h", "--json")
    assert json.loads(out) == []
    code, out = await asyncio.to_thread(
        run_cli,
        "history",
        url,
        "alpha",
        "--outcome",
        "running",
        "--outcome",
        "failed",
        "--limit",
        "1",
        "--json",
    )
    assert [r["slot_ms"] for r in json.loads(out)] == [3000]


class Starts:
    """Keeps what the started hook tells."""

    def __init__(self) -> None:
        self.seen: list[StartedScheduler] = []

    @hookimpl
    def anarchon_scheduler_started(self, scheduler: StartedScheduler) -> None:
        self.seen.append(scheduler)


async def test_the_started_hook_tells_who_started_where_with_which_jobs() -> None:
    s = scheduler(MemoryStore.create(), "a")

    @s.job("0 0 1 1 *", name="yearly")
    def yearly() -> None: ...

    starts = Starts()
    s.events.register(starts, name="starts")
    try:
        async with s:
            assert len(starts.seen) == 1
            seen = starts.seen[0]
            assert (seen.instance, seen.jobs, seen.store) == ("a", ("yearly",), s.store_name)
            assert seen.store.startswith("memory://")
            health = seen.health()
            assert health.started and health.ready and health.instance == "a"
        assert not seen.health().started, "the view reads the scheduler's health as it is now"
    finally:
        s.events.unregister(starts)
