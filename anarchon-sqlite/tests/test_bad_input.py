"""Bad paths, foreign files, tampered tables and bad options: clear errors, nothing overwritten."""

from __future__ import annotations

import sqlite3
from pathlib import Path
from typing import Any

import pytest

import anarchon
from anarchon import ClaimRequest, ConfigError, StoreCorrupt
from anarchon_sqlite import SQLiteStore


async def open_store(path: Path | str, **options: Any) -> SQLiteStore:
    store = SQLiteStore.create(path, **options)
    await store.open()
    return store


def snapshot(path: Path) -> dict[str, bytes]:
    """Every file SQLite keeps for `path` (the database and its WAL), byte for byte."""
    return {p.name: p.read_bytes() for p in sorted(path.parent.glob(path.name + "*"))}


async def test_missing_directory_names_the_path(tmp_path: Path) -> None:
    path = tmp_path / "nowhere" / "anarchon.db"
    with pytest.raises(ConfigError) as info:
        await open_store(path)
    message = str(info.value)
    assert f"its directory {tmp_path / 'nowhere'} does not exist" in message
    assert "create the directory first" in message
    assert not (tmp_path / "nowhere").exists()


async def test_parent_that_is_a_file_is_refused_even_for_root(tmp_path: Path) -> None:
    # Tests run as root, which writes through file permissions; no user can create a file
    # *inside a regular file*, so this path is unwritable for everyone.
    (tmp_path / "plain").write_text("not a directory")
    with pytest.raises(ConfigError, match=r"its directory .*plain is not a directory"):
        await open_store(tmp_path / "plain" / "anarchon.db")


async def test_a_directory_is_not_a_database_file(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match=r"is a directory; name a file inside it"):
        await open_store(tmp_path)


async def test_file_that_is_not_sqlite(tmp_path: Path) -> None:
    path = tmp_path / "notes.db"
    path.write_bytes(b"these are my notes, not a database\n" * 200)
    before = snapshot(path)
    with pytest.raises(StoreCorrupt) as info:
        await open_store(path)
    assert f"SQLite database {path} cannot be used" in str(info.value)
    assert "not a SQLite database" in str(info.value)
    assert snapshot(path) == before


async def make_db(path: Path) -> None:
    store = await open_store(path)
    await store.claim(ClaimRequest(job="keep", slot=await store.now_ms(), instance="a"))
    await store.close()


def tamper(path: Path, *statements: str) -> dict[str, bytes]:
    conn = sqlite3.connect(path, isolation_level=None)
    for statement in statements:
        conn.execute(statement)
    conn.execute("PRAGMA wal_checkpoint(TRUNCATE)")
    conn.close()
    return snapshot(path)


@pytest.mark.parametrize(
    ("statements", "expected"),
    [
        (
            ["ALTER TABLE anarchon_runs DROP COLUMN error"],
            "table anarchon_runs in SQLite database {path} has missing column(s) error",
        ),
        (
            ["ALTER TABLE anarchon_jobs ADD COLUMN note TEXT"],
            "table anarchon_jobs in SQLite database {path} has unknown column(s) note",
        ),
        (
            ["UPDATE anarchon_schema SET version = 7"],
            (
                "table anarchon_schema in SQLite database {path} has version 7 for component "
                "'sqlite'; this anarchon-sqlite reads version 1: upgrade anarchon-sqlite"
            ),
        ),
        (
            ["DELETE FROM anarchon_schema"],
            "table anarchon_schema in SQLite database {path} has no row for component 'sqlite'",
        ),
        (
            ["DROP TABLE anarchon_jobs"],
            (
                "table anarchon_jobs in SQLite database {path} is missing while other anarchon "
                "tables exist"
            ),
        ),
    ],
    ids=["missing-column", "extra-column", "wrong-version", "no-version", "missing-table"],
)
async def test_tampered_tables_are_corrupt_and_untouched(
    tmp_path: Path, statements: list[str], expected: str
) -> None:
    path = tmp_path / "anarchon.db"
    await make_db(path)
    before = tamper(path, *statements)
    with pytest.raises(StoreCorrupt) as info:
        await open_store(path)
    assert expected.format(path=path) in str(info.value)
    assert snapshot(path) == before


async def test_foreign_table_of_the_same_name(tmp_path: Path) -> None:
    path = tmp_path / "app.db"
    before = tamper(
        path,
        "CREATE TABLE anarchon_runs (id INTEGER PRIMARY KEY, payload TEXT)",
        "INSERT INTO anarchon_runs (payload) VALUES ('precious')",
    )
    with pytest.raises(StoreCorrupt) as info:
        await open_store(path)
    assert str(info.value).startswith(
        f"table anarchon_runs in SQLite database {path} has missing column(s) prefix, job, slot, "
    )
    assert "and unknown column(s) id, payload; it was not written by" in str(info.value)
    assert snapshot(path) == before
    conn = sqlite3.connect(path)
    assert conn.execute("SELECT payload FROM anarchon_runs").fetchall() == [("precious",)]
    conn.close()


async def test_unrelated_tables_in_the_file_are_fine(tmp_path: Path) -> None:
    path = tmp_path / "app.db"
    tamper(path, "CREATE TABLE users (id INTEGER PRIMARY KEY)", "INSERT INTO users VALUES (1)")
    store = await open_store(path)
    assert (await store.claim(ClaimRequest(job="j", slot=await store.now_ms(), instance="a"))).won
    await store.close()
    conn = sqlite3.connect(path)
    assert conn.execute("SELECT id FROM users").fetchall() == [(1,)]
    conn.close()


async def test_unknown_status_in_a_row_is_corrupt_naming_job_and_slot(tmp_path: Path) -> None:
    path = tmp_path / "anarchon.db"
    store = await open_store(path)
    slot = await store.now_ms()
    request = ClaimRequest(job="sync", slot=slot, instance="a")
    await store.claim(request)
    tamper(path, "UPDATE anarchon_runs SET status = 'paused'")
    for call in (store.claim(request), store.check(request), store.history("sync")):
        with pytest.raises(StoreCorrupt) as info:
            await call
        assert f"run of job 'sync' at slot {slot}" in str(info.value)
        assert "status 'paused'" in str(info.value)
    tamper(path, "UPDATE anarchon_runs SET status = 'running', attempt = 'two'")
    with pytest.raises(StoreCorrupt, match=r"has attempt 'two'; expected an integer from 1 to 999"):
        await store.claim(request)
    await store.close()


async def test_unknown_option_lists_the_valid_ones(tmp_path: Path) -> None:
    with pytest.raises(ConfigError) as info:
        anarchon.create_store(f"sqlite:///{tmp_path}/a.db?busy_timeout=5")
    assert str(info.value) == (
        "invalid options for sqlite://: unknown option busy_timeout for sqlite://; valid options: "
        "busy_timeout_ms, history_limit, prefix, retention_margin_ms"
    )


@pytest.mark.parametrize("value", ["0", "-5", "0ms", "11m"])
async def test_busy_timeout_must_be_positive_and_bounded(tmp_path: Path, value: str) -> None:
    with pytest.raises(ConfigError) as info:
        anarchon.create_store(f"sqlite:///{tmp_path}/a.db", busy_timeout_ms=value)
    assert "busy_timeout_ms" in str(info.value)


async def test_busy_timeout_accepts_durations(tmp_path: Path) -> None:
    store = anarchon.create_store(f"sqlite:///{tmp_path}/a.db?busy_timeout_ms=2s")
    assert isinstance(store, SQLiteStore)
    assert store.options.busy_timeout_ms == 2000


@pytest.mark.parametrize(
    ("url", "match"),
    [
        ("sqlite:///:memory:", "in-memory and URI databases are refused, because each connection"),
        ("sqlite://", "names no file"),
        ("sqlite://host/x.db", "names a host"),
    ],
)
async def test_urls_that_cannot_be_shared_are_refused(url: str, match: str) -> None:
    with pytest.raises(ConfigError, match=match):
        anarchon.create_store(url)


async def test_relative_and_absolute_paths(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)
    relative = anarchon.create_store("sqlite:///anarchon.db")
    absolute = anarchon.create_store(f"sqlite:///{tmp_path}/other.db")
    assert isinstance(relative, SQLiteStore) and isinstance(absolute, SQLiteStore)
    assert relative.path == str(tmp_path / "anarchon.db")
    assert absolute.path == str(tmp_path / "other.db")


async def test_calls_before_open_say_how_to_open(tmp_path: Path) -> None:
    store = SQLiteStore.create(tmp_path / "a.db")
    with pytest.raises(anarchon.StoreUnavailable, match="is not open"):
        await store.claim(ClaimRequest(job="j", slot=1, instance="a"))
