"""The fleet's member list (M1) on SQLite beyond the kit: damaged rows, written with raw SQL
behind the store's back, are a `StoreCorrupt` naming the table and the instance; a file made
before the member list gets the table on its next open, and read-only it has no member."""

from __future__ import annotations

import sqlite3
from pathlib import Path

import pytest

from anarchon import StoreCorrupt
from anarchon_sqlite import SQLiteStore


def sql(path: Path, statement: str, *params: object) -> None:
    conn = sqlite3.connect(path, isolation_level=None)
    try:
        conn.execute(statement, params)
    finally:
        conn.close()


@pytest.mark.parametrize(
    ("column", "value"),
    [("stats", "not json"), ("stats", '{"wins": 1.5}'), ("stats", "[]"), ("until_ms", "later")],
)
async def test_M1_a_damaged_member_row_is_corrupt_naming_it(
    tmp_path: Path, column: str, value: str
) -> None:
    path = tmp_path / "a.db"
    store = SQLiteStore.create(path)
    await store.open()
    try:
        await store.announce("good:1", 60_000, {"wins": 2})
        await store.announce("bad:2", 60_000)
        sql(path, f"UPDATE anarchon_members SET {column} = ? WHERE instance = 'bad:2'", value)
        with pytest.raises(StoreCorrupt, match=r"anarchon_members .*'bad:2'"):
            await store.members()
        back = await store.announce("bad:2", 60_000)  # replaces the damaged row
        assert [m.instance for m in await store.members()] == ["bad:2", "good:1"]
        assert back in await store.members()
    finally:
        await store.close()


async def test_M1_a_file_from_before_members_gets_the_table_and_reads_none(tmp_path: Path) -> None:
    path = tmp_path / "old.db"
    store = SQLiteStore.create(path)
    await store.open()
    await store.close()
    sql(path, "DROP TABLE anarchon_members")  # as a file written by the release before M1
    reader = SQLiteStore.create(path)
    await reader.open_read_only()
    try:
        assert await reader.members() == []
    finally:
        await reader.close()
    store = SQLiteStore.create(path)
    await store.open()
    try:
        member = await store.announce("w:1", 60_000)
        assert await store.members() == [member]
    finally:
        await store.close()
