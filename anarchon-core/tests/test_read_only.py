"""Read-only commands stay read-only (rule R1): ``anarchon.connect(url, read_only=True)``, the
`memory://` model's `open_read_only`, ``anarchon history`` / ``status`` changing no byte of a
used SQLite file (also a read-only file on a read-only file system), the exit code 5 of a store
without anarchon data, and ``anarchon next`` / ``backends`` opening no store at all."""

from __future__ import annotations

import asyncio
import json
import os
import shutil
import subprocess
import sys
import types
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner, Result

import anarchon
from anarchon import (
    ClaimRequest,
    ConfigError,
    MemoryStore,
    RunStatus,
    StoreNotSetUp,
    SupportsReadOnly,
    hookimpl,
    new_token,
)
from anarchon.cli import EXIT_STORE_NOT_SET_UP, cli
from anarchon.plugins import plugin_manager, reset_plugin_manager
from anarchon.plugins._registry import BackendRegistry

SLOT = 1_800_000_000_000  # 2027-01-15T08:00:00Z


def invoke(*args: str) -> Result:
    return CliRunner().invoke(cli, list(args), prog_name="anarchon")


def request(job: str, slot: int = SLOT) -> ClaimRequest:
    return ClaimRequest(
        job=job,
        slot=slot,
        token=new_token(),
        instance="host:1:abcd",
        lease_ms=60_000,
        max_late_ms=10**13,  # slots far from now are never late here
        attempts=3,
    )


# -- connect(read_only=True) and memory:// ----------------------------------------------------


class NoReadOnly(MemoryStore):
    """A third-party store that predates `SupportsReadOnly`: it has only `open`."""

    opened: list[str] = []  # noqa: RUF012 - shared on purpose: what any instance opened

    async def open(self) -> None:
        NoReadOnly.opened.append(str(self.url))
        await super().open()

    open_read_only = None  # type: ignore[assignment]  # not the protocol's method


class NoReadOnlyPlugin:
    @hookimpl
    def anarchon_register_backends(self, registry: BackendRegistry) -> None:
        registry.add("noreadonly", "anarchon_test_noreadonly:NoReadOnly", "old third party")


@pytest.fixture
def no_read_only_backend(monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    module = types.ModuleType("anarchon_test_noreadonly")
    module.NoReadOnly = NoReadOnly  # type: ignore[attr-defined]
    monkeypatch.setitem(sys.modules, "anarchon_test_noreadonly", module)
    reset_plugin_manager()
    plugin_manager().register(NoReadOnlyPlugin(), name="noreadonly")
    NoReadOnly.opened.clear()
    yield
    reset_plugin_manager()


async def test_a_backend_without_read_only_is_refused_never_opened(
    no_read_only_backend: None,
) -> None:
    assert not isinstance(anarchon.create_store("noreadonly://x"), SupportsReadOnly)
    with pytest.raises(ConfigError, match=r"noreadonly:// .* cannot open a store read-only") as e:
        await anarchon.connect("noreadonly://x", read_only=True)
    assert "SupportsReadOnly" in str(e.value)
    assert NoReadOnly.opened == []
    async with anarchon.connect("noreadonly://x") as store:  # the ordinary way still works
        assert store.capabilities.history
    assert NoReadOnly.opened == ["noreadonly://x"]


def test_the_cli_refuses_it_as_bad_configuration(no_read_only_backend: None) -> None:
    for args in (("history", "noreadonly://x", "job"), ("status", "noreadonly://x", "--once")):
        result = invoke(*args)
        assert result.exit_code == 2, result.output
        assert "cannot open a store read-only" in result.stderr
    assert NoReadOnly.opened == []


async def test_memory_is_set_up_by_open_per_prefix_and_reading_writes_nothing() -> None:
    name = f"ro{uuid.uuid4().hex[:8]}"
    for url in (f"memory://{name}", "memory://"):
        with pytest.raises(StoreNotSetUp, match="holds no anarchon data for prefix 'cron'"):
            await anarchon.connect(url, read_only=True)
    async with anarchon.connect(f"memory://{name}") as writer:
        assert isinstance(writer, MemoryStore)
        async with anarchon.connect(f"memory://{name}", read_only=True) as reader:
            assert await reader.history("a") == []
            assert isinstance(reader, MemoryStore)
            assert await reader.jobs() == []
            claim = request("a")
            assert (await writer.claim(claim)).won
            assert await writer.finish("a", SLOT, claim.token, RunStatus.SUCCEEDED)
            assert await reader.history("a") == await writer.history("a")
            assert await reader.jobs() == ["a"]
            assert (reader.options.prefix, "nothing") not in reader._ns.jobs
            await reader.history("nothing")
            assert (reader.options.prefix, "nothing") not in reader._ns.jobs  # R1: no entry
        with pytest.raises(StoreNotSetUp, match="prefix 'other'"):
            await anarchon.connect(f"memory://{name}?prefix=other", read_only=True)
    # Runs written without open() (tests and examples do) are anarchon data too.
    bare = MemoryStore.create(f"{name}b")
    assert (await bare.claim(request("b"))).won
    async with anarchon.connect(f"memory://{name}b", read_only=True) as reader:
        assert await reader.jobs() == ["b"]


def test_status_of_memory_says_it_lives_in_another_process() -> None:
    # The CLI runs in this process here: a name no other test uses stands for another process.
    url = f"memory://elsewhere-{uuid.uuid4().hex[:8]}"
    result = invoke("status", url, "--once")
    assert result.exit_code == EXIT_STORE_NOT_SET_UP == 5, result.output
    assert "memory:// stores live inside one process" in result.stderr
    assert result.stderr.startswith(f"anarchon: error: {url} holds no anarchon data")


# -- the CLI on SQLite files ------------------------------------------------------------------


async def _fill(url: str) -> None:
    async with anarchon.connect(url) as store:
        assert isinstance(store, anarchon.LeaseStore)
        for job, status in (("report", RunStatus.SUCCEEDED), ("export", RunStatus.FAILED)):
            claim = request(job)
            assert (await store.claim(claim)).won
            assert await store.finish(
                job, SLOT, claim.token, status, "boom" if status is RunStatus.FAILED else None
            )


def snapshot(directory: Path) -> dict[str, tuple[bytes, int, int]]:
    """Every file of `directory`: bytes, modification time and mode."""
    return {
        p.name: (p.read_bytes(), p.stat().st_mtime_ns, p.stat().st_mode)
        for p in sorted(directory.iterdir())
    }


def run_cli(*args: str, wrap: list[str] | None = None) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("ANARCHON_")}
    return subprocess.run(
        [*(wrap or []), sys.executable, "-m", "anarchon.cli", *args],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
        env=env,
    )


def _check_reads(url: str, wrap: list[str] | None = None) -> None:
    history = run_cli("history", url, "report", "--json", wrap=wrap)
    assert history.returncode == 0, history.stderr
    assert [r["status"] for r in json.loads(history.stdout)] == ["succeeded"]
    status = run_cli("status", url, "--json", wrap=wrap)
    assert status.returncode == 0, status.stderr
    shown = json.loads(status.stdout)
    assert [job["job"] for job in shown["jobs"]] == ["export", "report"]
    once = run_cli("status", url, "--once", wrap=wrap)
    assert once.returncode == 0, once.stderr
    assert "report" in once.stdout and "failed" in once.stdout


@pytest.mark.processes
def test_history_and_status_change_no_byte_of_a_used_database(tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path / 'app.db'}"
    asyncio.run(_fill(url))
    before = snapshot(tmp_path)
    assert list(before) == ["app.db"]
    _check_reads(url)
    assert snapshot(tmp_path) == before


@pytest.mark.processes
def test_history_and_status_read_a_read_only_file_in_a_read_only_directory(
    tmp_path: Path,
) -> None:
    data = tmp_path / "data"
    data.mkdir()
    url = f"sqlite:///{data / 'app.db'}"
    asyncio.run(_fill(url))
    (data / "app.db").chmod(0o444)
    data.chmod(0o555)
    try:
        before = snapshot(data)
        wrap: list[str] | None = None
        if os.geteuid() == 0:
            # Root writes through any mode bits: a read-only bind mount, in a mount namespace
            # of the command's own, refuses root's writes too.
            unshare = shutil.which("unshare")
            probe = subprocess.run(
                [unshare or "unshare", "--mount", "true"], capture_output=True, check=False
            )
            if unshare is None or probe.returncode != 0:
                pytest.skip("running as root without `unshare --mount`: mode bits bind nothing")
            script = 'mount --bind "$0" "$0" && mount -o remount,ro,bind "$0" && exec "$@"'
            wrap = [unshare, "--mount", "sh", "-c", script, str(data)]
            denied = subprocess.run(
                [*wrap, "touch", str(data / "x")], capture_output=True, check=False, timeout=30
            )
            assert denied.returncode != 0, "inside, the directory must really be read-only"
        _check_reads(url, wrap)
        assert snapshot(data) == before
    finally:
        data.chmod(0o755)


def test_a_file_of_another_application_is_exit_5_and_untouched(tmp_path: Path) -> None:
    import sqlite3

    other = tmp_path / "other.db"
    conn = sqlite3.connect(other)
    conn.execute("CREATE TABLE users (name TEXT)")
    conn.commit()
    conn.close()
    before = snapshot(tmp_path)
    for args in (("history", f"sqlite:///{other}", "job"), ("status", f"sqlite:///{other}")):
        result = invoke(*args)
        assert result.exit_code == 5, result.output
        assert f"SQLite database {other} holds no anarchon tables" in result.stderr
    assert snapshot(tmp_path) == before


# -- commands that open no store --------------------------------------------------------------


def test_next_and_backends_open_no_store(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from anarchon_sqlite import SQLiteStore

    opened: list[str] = []

    def spy(cls: type[Any], method: str) -> None:
        original = getattr(cls, method)

        async def recording(self: Any) -> None:
            opened.append(f"{cls.__name__}.{method}")
            await original(self)

        monkeypatch.setattr(cls, method, recording)

    for cls in (MemoryStore, SQLiteStore):
        spy(cls, "open")
        spy(cls, "open_read_only")
    monkeypatch.chdir(tmp_path)
    for args in (("backends",), ("backends", "--json"), ("next", "*/5 * * * *", "-n", "3")):
        result = invoke(*args)
        assert result.exit_code == 0, result.output
    assert opened == []
    assert list(tmp_path.iterdir()) == []  # not even the default sqlite:///anarchon.db
    # The spies do see a command that opens a store.
    assert invoke("status", "sqlite:///anarchon.db").exit_code == 5
    assert opened == ["SQLiteStore.open_read_only"]
