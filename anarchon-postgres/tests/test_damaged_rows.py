"""PostgreSQL runs damaged behind the store's back (issue 21, finding 6): `history` returns the
runs it can read and names each bad row by its slot (`DamagedHistory`), and ``anarchon history``
shows the good rows beside a ``damaged`` one."""

from __future__ import annotations

import asyncio
import json

import psycopg
import pytest
from click.testing import CliRunner
from psycopg import sql

from anarchon import ClaimRequest, DamagedHistory, Outcome
from anarchon.cli import cli
from anarchon_postgres import PostgresStore

from .conftest import POSTGRES_URL, url_with

SLOT = 1_800_000_000_000
SLOTS = [SLOT + i * 1000 for i in range(5)]


async def filled(schema: str) -> PostgresStore:
    """An open store whose job ``j`` has a skip record at each of `SLOTS`."""
    store = PostgresStore.create(url_with(schema))
    await store.open()
    for slot in SLOTS:
        request = ClaimRequest(
            job="j", slot=slot, instance="web-1", max_late_ms=10**12, skip_reason="paused: test"
        )
        assert (await store.claim(request)).outcome is Outcome.SKIPPED
    return store


def damage(schema: str, change: str) -> None:
    with psycopg.connect(POSTGRES_URL, autocommit=True) as conn:
        conn.execute(
            sql.SQL("UPDATE {} SET " + change + " WHERE slot = %s").format(
                sql.Identifier(schema, "anarchon_runs")
            ),
            (SLOTS[2],),
        )


@pytest.mark.parametrize(
    ("change", "named"),
    [
        ("attempt = -1", "has attempt -1"),
        ("status = 'paused'", "has status 'paused'"),
        ("status = 'running', attempt = 1, lease_until = NULL", "running with no lease_until"),
        ("slot = -5", "has slot -5"),
    ],
)
async def test_history_returns_the_good_rows_and_names_the_bad_one(
    schema: str, change: str, named: str
) -> None:
    store = await filled(schema)
    try:
        damage(schema, change)
        with pytest.raises(DamagedHistory) as info:
            await store.history("j", 100)
    finally:
        await store.close()
    good = {r.slot for r in info.value.records}
    assert good == set(SLOTS) - {SLOTS[2]}, good
    (bad,) = info.value.damaged
    assert named in bad.problem and bad.job == "j", bad


def test_the_history_command_shows_the_damaged_row_among_the_good_ones(schema: str) -> None:
    async def fill() -> None:
        await (await filled(schema)).close()

    asyncio.run(fill())
    damage(schema, "status = 'paused'")
    result = CliRunner().invoke(cli, ["history", url_with(schema), "j", "--json"])
    assert result.exit_code == 4, result.output
    rows = json.loads(result.stdout)
    statuses = [row["status"] for row in rows]
    assert statuses.count("skipped") == 4 and statuses.count("damaged") == 1, rows
    (bad,) = [row for row in rows if row["status"] == "damaged"]
    assert "paused" in bad["error"] and bad["slot_ms"] == SLOTS[2], bad
