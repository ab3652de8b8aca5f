"""`SQLiteStore.open_read_only` (rule R1): no file, table, log file or byte is written; a missing
file or one without anarchon's tables is `StoreNotSetUp`; reads see what schedulers wrote, also
runs written after the read-only store opened."""

from __future__ import annotations

import sqlite3
from pathlib import Path

import pytest

import anarchon
from anarchon import (
    ClaimRequest,
    ConfigError,
    LeaseStore,
    RunStatus,
    StoreCorrupt,
    StoreNotSetUp,
    new_token,
)
from anarchon_sqlite import SQLiteStore

SLOT = 1_800_000_000_000


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


def snapshot(directory: Path) -> dict[str, tuple[bytes, int]]:
    """Every file of `directory`: its bytes and its modification time."""
    return {p.name: (p.read_bytes(), p.stat().st_mtime_ns) for p in sorted(directory.iterdir())}


async def fill(path: Path, prefix: str = "cron") -> LeaseStore:
    """A store of `path` (left open) with a succeeded run of job a and a running one of job b."""
    store = SQLiteStore.create(path, prefix=prefix)
    await store.open()
    done, running = request("a"), request("b")
    assert (await store.claim(done)).won and (await store.claim(running)).won
    assert await store.finish("a", SLOT, done.token, RunStatus.SUCCEEDED)
    return store


async def test_a_missing_file_is_not_set_up_and_stays_missing(tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path / 'typo.db'}"
    for _ in range(2):
        with pytest.raises(StoreNotSetUp, match=f"no SQLite database file {tmp_path}/typo.db"):
            await anarchon.connect(url, read_only=True)
    assert snapshot(tmp_path) == {}


async def test_a_file_without_our_tables_is_not_set_up_and_untouched(tmp_path: Path) -> None:
    other = tmp_path / "other.db"
    conn = sqlite3.connect(other)
    conn.execute("CREATE TABLE users (name TEXT)")
    conn.commit()
    conn.close()
    before = snapshot(tmp_path)
    with pytest.raises(StoreNotSetUp, match=r"holds no anarchon tables \(anarchon_schema"):
        await anarchon.connect(f"sqlite:///{other}", read_only=True)
    assert snapshot(tmp_path) == before


async def test_tampered_tables_are_corrupt_and_untouched(tmp_path: Path) -> None:
    path = tmp_path / "anarchon.db"
    await (await fill(path)).close()
    conn = sqlite3.connect(path)
    conn.execute("ALTER TABLE anarchon_runs ADD COLUMN extra TEXT")
    conn.commit()
    conn.close()
    before = snapshot(tmp_path)
    with pytest.raises(StoreCorrupt, match="unknown column"):
        await anarchon.connect(f"sqlite:///{path}", read_only=True)
    assert snapshot(tmp_path) == before


async def test_a_directory_is_refused(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match="is a directory"):
        await anarchon.connect(f"sqlite:///{tmp_path}", read_only=True)


async def test_reading_a_closed_database_writes_nothing_not_even_log_files(
    tmp_path: Path,
) -> None:
    path = tmp_path / "anarchon.db"
    writer = await fill(path)
    runs, jobs = await writer.history("a"), await writer.jobs()
    await writer.close()
    before = snapshot(tmp_path)
    assert list(before) == ["anarchon.db"]  # the last connection closed: no -wal, no -shm
    async with anarchon.connect(f"sqlite:///{path}", read_only=True) as reader:
        assert isinstance(reader, SQLiteStore)
        assert await reader.history("a") == runs
        assert await reader.jobs() == jobs == ["a", "b"]
        assert await reader.now_ms() is not None
        with pytest.raises(ConfigError, match="opened read-only"):
            await reader.claim(request("c"))
        with pytest.raises(ConfigError, match="opened read-only"):
            await reader.renew("b", SLOT, new_token(), 1000)
    assert snapshot(tmp_path) == before


async def test_a_reader_sees_a_scheduler_that_starts_after_it(tmp_path: Path) -> None:
    """Opened while no connection had the file (read as it is), the reader reads through the
    log once a scheduler has the file open, whose claims are not in the file yet."""
    path = tmp_path / "anarchon.db"
    await (await fill(path)).close()
    async with anarchon.connect(f"sqlite:///{path}", read_only=True) as reader:
        assert [r.job for r in [*await reader.history("a"), *await reader.history("c")]] == ["a"]
        writer = SQLiteStore.create(path)
        await writer.open()
        try:
            later = request("c", SLOT + 60_000)
            assert (await writer.claim(later)).won
            assert (tmp_path / "anarchon.db-wal").exists()
            assert [r.token for r in await reader.history("c")] == [later.token]
            assert await reader.jobs() == ["a", "b", "c"]
        finally:
            await writer.close()
        assert [r.token for r in await reader.history("c")] == [later.token]


async def test_reads_keep_to_the_prefix(tmp_path: Path) -> None:
    path = tmp_path / "anarchon.db"
    await (await fill(path, prefix="shop")).close()
    async with anarchon.connect(f"sqlite:///{path}?prefix=other", read_only=True) as reader:
        assert await reader.jobs() == []
        assert await reader.history("a") == []
    async with anarchon.connect(f"sqlite:///{path}?prefix=shop", read_only=True) as reader:
        assert await reader.jobs() == ["a", "b"]


async def test_open_after_a_read_only_open_claims_again(tmp_path: Path) -> None:
    path = tmp_path / "anarchon.db"
    await (await fill(path)).close()
    store = SQLiteStore.create(path)
    await store.open_read_only()
    await store.close()
    await store.open()
    try:
        assert (await store.claim(request("d"))).won
    finally:
        await store.close()
