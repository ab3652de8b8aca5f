"""A SQLite file with damaged rows, written with raw SQL behind the store's back (issue 21,
finding 6): `history` returns what it can and names each bad row by its slot; ``anarchon history``
and ``anarchon status`` show the good rows and a row saying what is wrong; a claim that reads a
damaged row or floor names the field, and the scheduler is not ready until such a claim succeeds.
"""

from __future__ import annotations

import asyncio
import json
import sqlite3
import time
from collections.abc import Callable
from pathlib import Path

import pytest
from click.testing import CliRunner, Result

import anarchon
from anarchon import ClaimRequest, Outcome, Run, Scheduler, StoreCorrupt
from anarchon.cli import EXIT_STORE_CORRUPT, cli
from anarchon_sqlite import SQLiteStore

SLOT = 1_800_000_000_000
SLOTS = [SLOT + i * 1000 for i in range(5)]
PREFIX = "cron"


def sql(path: Path, statement: str, *params: object) -> None:
    conn = sqlite3.connect(path, isolation_level=None)
    try:
        conn.execute(statement, params)
    finally:
        conn.close()


async def filled(path: Path) -> SQLiteStore:
    """An open store whose job ``j`` has a skip record at each of `SLOTS`."""
    store = SQLiteStore.create(path)
    await store.open()
    for slot in SLOTS:
        request = ClaimRequest(
            job="j", slot=slot, instance="web-1", max_late_ms=10**12, skip_reason="paused: test"
        )
        assert (await store.claim(request)).outcome is Outcome.SKIPPED
    return store


DAMAGE = [
    pytest.param("slot = 'abc'", "has slot 'abc'", None, id="text-slot"),
    pytest.param("attempt = -1", "has attempt -1", SLOTS[2], id="negative-attempt"),
    pytest.param("status = 'paused'", "has status 'paused'", SLOTS[2], id="bad-status"),
    pytest.param("holder = x'00ff'", "has holder b'\\x00\\xff'", SLOTS[2], id="blob-holder"),
]


@pytest.mark.parametrize(("change", "named", "slot"), DAMAGE)
async def test_history_returns_the_good_rows_and_names_the_bad_one(
    tmp_path: Path, change: str, named: str, slot: int | None
) -> None:
    path = tmp_path / "anarchon.db"
    store = await filled(path)
    sql(path, f"UPDATE anarchon_runs SET {change} WHERE slot = ?", SLOTS[2])
    with pytest.raises(StoreCorrupt) as caught:
        await store.history("j", 10)
    error = caught.value
    assert isinstance(error, anarchon.DamagedHistory), error
    assert sorted(r.slot for r in error.records) == [SLOTS[0], SLOTS[1], SLOTS[3], SLOTS[4]]
    (bad,) = error.damaged
    assert named in bad.problem and str(path) in bad.problem
    assert bad.slot == slot
    assert bad.key == ("slot 'abc'" if slot is None else f"slot {SLOTS[2]}")
    # The limit counts the bad row like any other.
    with pytest.raises(StoreCorrupt) as caught:
        await store.history("j", 3)
    error = caught.value
    assert isinstance(error, anarchon.DamagedHistory)
    assert len(error.records) + len(error.damaged) == 3
    await store.close()


async def test_a_text_slot_is_not_reported_as_a_bad_attempt(tmp_path: Path) -> None:
    """The finding: a skip record (attempt 0) with a text slot was "attempt 0; expected an
    integer >= 0"."""
    path = tmp_path / "anarchon.db"
    store = await filled(path)
    sql(path, "UPDATE anarchon_runs SET slot = 'abc' WHERE slot = ?", SLOTS[2])
    with pytest.raises(StoreCorrupt) as caught:
        await store.history("j")
    assert "has slot 'abc'" in str(caught.value)
    assert "attempt" not in str(caught.value)
    await store.close()


@pytest.mark.parametrize(("change", "named", "slot"), DAMAGE)
def test_cli_history_and_status_show_the_good_rows_and_the_bad_one(
    tmp_path: Path, change: str, named: str, slot: int | None
) -> None:
    path = tmp_path / "anarchon.db"
    fill(path)
    sql(path, f"UPDATE anarchon_runs SET {change} WHERE slot = ?", SLOTS[2])
    url = f"sqlite:///{path}"

    result = invoke("history", url, "j")
    assert result.exit_code == EXIT_STORE_CORRUPT, result.output
    assert result.stdout.count("paused: test") == 4
    key = "slot 'abc'" if slot is None else "2027-01-15T08:00:02Z"
    damaged_row = next(line for line in result.stdout.splitlines() if "damaged" in line)
    assert key in damaged_row and "run of job 'j'" in damaged_row  # its message starts there
    assert "cannot be read" in result.stderr and named in result.stderr

    entries = json.loads(invoke("history", url, "j", "--json").stdout)
    assert [e["status"] for e in entries].count("skipped") == 4
    (bad,) = [e for e in entries if e["status"] == "damaged"]
    assert named in bad["error"] and bad["slot_ms"] == slot

    result = invoke("status", url, "--once")
    assert result.exit_code == EXIT_STORE_CORRUPT, result.output
    assert "4 skipped (last 4)" in result.stdout
    assert named in " ".join(result.stdout.split())  # the note under the table, maybe wrapped
    (job,) = json.loads(invoke("status", url, "--json").stdout)["jobs"]
    assert job["counts"] == {"skipped": 4}
    assert named in job["damaged"][0]["error"]


async def test_a_claim_of_a_damaged_row_names_the_field(tmp_path: Path) -> None:
    path = tmp_path / "anarchon.db"
    store = await filled(path)
    sql(path, "UPDATE anarchon_runs SET attempt = -1 WHERE slot = ?", SLOTS[2])
    request = ClaimRequest(job="j", slot=SLOTS[2], instance="web-2", max_late_ms=10**12)
    for call in (store.claim, store.check):
        with pytest.raises(StoreCorrupt, match=r"has attempt -1; expected an integer from 0"):
            await call(request)
    await store.close()


@pytest.mark.slow
async def test_a_corrupt_floor_is_named_and_makes_the_scheduler_not_ready(tmp_path: Path) -> None:
    path = tmp_path / "anarchon.db"
    store = SQLiteStore.create(path)
    s = Scheduler(store, instance="a", environ={})
    ran: list[int] = []

    @s.job("* * * * * *", max_late="500ms")
    def tick(run: Run) -> None:
        ran.append(run.slot)

    async with s:
        await eventually(lambda: bool(ran) and s.health().ready)
        sql(
            path,
            "INSERT INTO anarchon_jobs (prefix, job, floor) VALUES (?, 'tick', 'bad')",
            PREFIX,
        )
        await eventually(lambda: not s.health().ready)
        problem = s.health().damaged_jobs["tick"]
        assert "floor of job 'tick'" in problem and "is 'bad'" in problem
        assert "anarchon_jobs" in problem
        _, claim = s.last_claims["tick"]
        assert claim.outcome is Outcome.UNKNOWN and "floor of job 'tick'" in claim.reason
        sql(path, "UPDATE anarchon_jobs SET floor = 0 WHERE job = 'tick'")
        await eventually(lambda: s.health().ready)


def invoke(*args: str) -> Result:
    return CliRunner().invoke(cli, list(args), prog_name="anarchon")


def fill(path: Path) -> None:
    async def main() -> None:
        await (await filled(path)).close()

    asyncio.run(main())


async def eventually(condition: Callable[[], bool], timeout: float = 5.0) -> None:
    """Wait until `condition()` holds, failing after `timeout` seconds."""
    deadline = time.monotonic() + timeout
    while not condition():
        if time.monotonic() > deadline:
            pytest.fail(f"timed out after {timeout} s")
        await asyncio.sleep(0.01)
