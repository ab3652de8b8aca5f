"""The fleet's member list (M1) on PostgreSQL beyond the kit: a damaged row, written as the
superuser behind the store's back, is a `StoreCorrupt` naming the table and the instance, and
the member announcing again replaces it; many members announcing at once (each sweeping the
ones that ended) never wait on each other's sweeps."""

from __future__ import annotations

import asyncio

import pytest

from anarchon import StoreCorrupt
from anarchon_postgres import PostgresStore

from .conftest import admin


@pytest.mark.parametrize(
    "change", ["stats = 'not json'", "stats = '{\"wins\": true}'", "started_ms = until_ms + 1"]
)
async def test_M1_a_damaged_member_row_is_corrupt_naming_it(
    pg_store: PostgresStore, schema: str, change: str
) -> None:
    good = await pg_store.announce("good:1", 60_000, {"wins": 2})
    await pg_store.announce("bad:2", 60_000)
    admin(f"UPDATE \"{schema}\".anarchon_runs_members SET {change} WHERE instance = 'bad:2'")
    with pytest.raises(StoreCorrupt, match=r"anarchon_runs_members .*'bad:2'"):
        await pg_store.members()
    back = await pg_store.announce("bad:2", 60_000)
    assert await pg_store.members() == [back, good]


async def test_M1_members_announce_at_once_while_others_end(pg_store: PostgresStore) -> None:
    """100 members with a short ttl end; 100 others announce at once, each sweeping: every
    announce answers, and only the live ones are listed."""
    short = [f"short:{n}" for n in range(100)]
    ended = await asyncio.gather(*(pg_store.announce(name, 100) for name in short))
    last = max(m.until_ms for m in ended)
    deadline = asyncio.get_running_loop().time() + 10
    while await pg_store.now_ms() <= last:  # past the short ttl by the server's clock
        assert asyncio.get_running_loop().time() < deadline, "the server's clock stands still"
        await asyncio.sleep(0.01)
    live = [f"live:{n:03d}" for n in range(100)]
    await asyncio.wait_for(asyncio.gather(*(pg_store.announce(name, 60_000) for name in live)), 30)
    assert [m.instance for m in await pg_store.members()] == live
