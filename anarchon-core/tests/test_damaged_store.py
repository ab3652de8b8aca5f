"""A damaged store (issue 21, finding 6): `history` and the CLI show what they can of a job with a
bad row and name the bad row; `RunRecord.from_row` names the field that is wrong; a claim the
store answers with damaged data makes `health().ready` false, naming the error, until a claim of
that job succeeds again, and the job's neighbours keep running.

The damage is written behind the store's back: with `MemoryStore.damage` (the backdoor of the
reference model) and with raw SQL into a SQLite file. Backend-specific damage (raw Redis
commands, foreign NATS messages) is tested in each backend's tests.
"""

from __future__ import annotations

import asyncio
import json
import os
import sqlite3
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner, Result
from hypothesis import HealthCheck, assume, given, settings
from hypothesis import strategies as st

import anarchon
from anarchon import (
    ClaimRequest,
    MemoryStore,
    Outcome,
    Run,
    RunRecord,
    RunStatus,
    Scheduler,
    StoreCorrupt,
    new_token,
)
from anarchon._claims import MAX_ATTEMPTS, MAX_SLOT_MS
from anarchon._runtime.claimer import UNANSWERED
from anarchon.cli import EXIT_STORE_CORRUPT, cli
from anarchon_test_support import eventually

SLOT = 1_800_000_000_000
SECOND = 1000


# -- reading a row ------------------------------------------------------------------------------

GOOD_ROW = (SLOT, "succeeded", 1, new_token(), "web-1", SLOT, SLOT + 60_000, SLOT + 5, None)
FIELDS = (
    "slot",
    "status",
    "attempt",
    "token",
    "holder",
    "claimed_at",
    "lease_until",
    "finished_at",
    "error",
)


def row_with(**changes: object) -> tuple[object, ...]:
    values = dict(zip(FIELDS, GOOD_ROW, strict=True))
    values.update(changes)
    return tuple(values[f] for f in FIELDS)


def test_a_good_row_is_read() -> None:
    record = RunRecord.from_row(GOOD_ROW, job="j", where="t")
    assert (record.slot, record.status, record.attempt) == (SLOT, RunStatus.SUCCEEDED, 1)


@pytest.mark.parametrize(
    ("changes", "named"),
    [
        # A text slot was reported as a bad "attempt" (the finding).
        ({"slot": "abc"}, "has slot 'abc'"),
        ({"slot": "abc", "status": "skipped", "attempt": 0}, "has slot 'abc'"),
        ({"slot": -1}, "has slot -1"),
        ({"slot": MAX_SLOT_MS + 1}, f"has slot {MAX_SLOT_MS + 1}"),
        ({"slot": True}, "has slot True"),
        ({"attempt": -1}, "has attempt -1"),
        ({"attempt": "2"}, "has attempt '2'"),
        ({"attempt": 0}, "has attempt 0"),
        ({"attempt": MAX_ATTEMPTS + 1}, f"has attempt {MAX_ATTEMPTS + 1}"),
        ({"status": "bogus"}, "has status 'bogus'"),
        ({"status": None}, "has status None"),
        ({"lease_until": "soon"}, "has lease_until 'soon'"),
        ({"claimed_at": 1.5}, "has claimed_at 1.5"),
        ({"finished_at": MAX_SLOT_MS + 1}, f"has finished_at {MAX_SLOT_MS + 1}"),
        ({"token": b"x"}, "has token b'x'"),
        ({"holder": None}, "has holder None"),
        ({"error": 7}, "has error 7"),
        ({"status": "running", "lease_until": None}, "running with no lease_until"),
    ],
)
def test_from_row_names_the_field_that_is_wrong(changes: dict[str, object], named: str) -> None:
    with pytest.raises(StoreCorrupt) as caught:
        RunRecord.from_row(row_with(**changes), job="j", where="test.db")
    message = str(caught.value)
    assert named in message, message
    assert "job 'j'" in message and "test.db" in message
    assert "remove or repair the row" in message
    wrong = {f for f in FIELDS if f"has {f} " in message}
    assert len(wrong) <= 1, f"names more than one field: {message}"


def test_a_huge_value_is_cut_in_the_message() -> None:
    with pytest.raises(StoreCorrupt) as caught:
        RunRecord.from_row(row_with(status="x" * 100_000), job="j", where="t")
    assert len(str(caught.value)) < 600


# -- history of a damaged job -------------------------------------------------------------------


def fill(store: MemoryStore, job: str, slots: list[int]) -> None:
    """Skip records (finished runs) at `slots`, written through the store's own claims."""

    async def claims() -> None:
        for slot in slots:
            request = ClaimRequest(
                job=job,
                slot=slot,
                instance="web-1",
                max_late_ms=MAX_SLOT_MS,
                skip_reason="paused: by the test",
            )
            assert (await store.claim(request)).outcome is Outcome.SKIPPED

    asyncio.run(claims())


def shared_memory() -> tuple[str, MemoryStore]:
    name = "t" + uuid.uuid4().hex[:8]
    return f"memory://{name}", MemoryStore.create(name)


SLOTS = [SLOT + i * SECOND for i in range(5)]


@pytest.mark.parametrize(
    ("damage", "named"),
    [
        ({"slot": "abc"}, "has slot 'abc'"),
        ({"attempt": -1}, "has attempt -1"),
        ({"status": "bogus"}, "has status 'bogus'"),
        ({"finished_at": "later"}, "has finished_at 'later'"),
    ],
)
def test_history_keeps_the_good_runs_and_names_the_bad_one(
    damage: dict[str, object], named: str
) -> None:
    _, store = shared_memory()
    fill(store, "j", SLOTS)
    store.damage("j", SLOTS[2], **damage)
    with pytest.raises(StoreCorrupt) as caught:
        asyncio.run(store.history("j", 10))
    error = caught.value
    assert isinstance(error, anarchon.DamagedHistory)
    assert [r.slot for r in error.records] == [SLOTS[4], SLOTS[3], SLOTS[1], SLOTS[0]]
    (bad,) = error.damaged
    assert bad.job == "j"
    assert bad.key == f"slot {SLOTS[2]}"
    assert bad.slot == SLOTS[2]
    assert named in bad.problem
    assert named in str(error) and "1 stored run(s) of job 'j' cannot be read, 4 can" in str(error)


def test_history_of_a_sound_job_is_a_plain_list() -> None:
    _, store = shared_memory()
    fill(store, "j", SLOTS)
    store.damage("other", None, floor="bad")
    assert [r.slot for r in asyncio.run(store.history("j", 3))] == SLOTS[:1:-1]


# -- the CLI --------------------------------------------------------------------------------------


def invoke(*args: str) -> Result:
    return CliRunner().invoke(cli, list(args), prog_name="anarchon")


@pytest.fixture
def damaged_url() -> Iterator[str]:
    """A memory:// store shared with the CLI (same process) whose job ``j`` has five runs, the
    middle one with the text slot ``'abc'``."""
    url, store = shared_memory()
    fill(store, "j", SLOTS)
    store.damage("j", SLOTS[2], slot="abc")
    yield url


def test_cli_history_shows_the_good_rows_and_a_row_naming_the_bad_one(damaged_url: str) -> None:
    result = invoke("history", damaged_url, "j")
    assert result.exit_code == EXIT_STORE_CORRUPT, result.output
    assert result.stdout.count("skipped") == 4, result.stdout
    damaged_line = next(line for line in result.stdout.splitlines() if "damaged" in line)
    assert "2027-01-15T08:00:02Z" in damaged_line  # the bad row's place: its key's slot
    assert "a run of job 'j'" in damaged_line  # what is wrong (folded over the next lines)
    assert "1 stored run(s) of job 'j' cannot be read" in result.stderr
    assert "has slot 'abc'" in result.stderr
    assert "Traceback" not in result.output


def test_cli_history_json_has_an_entry_with_the_error(damaged_url: str) -> None:
    result = invoke("history", damaged_url, "j", "--json")
    assert result.exit_code == EXIT_STORE_CORRUPT, result.output
    entries = json.loads(result.stdout)
    assert [e["status"] for e in entries] == ["skipped", "skipped", "damaged", "skipped", "skipped"]
    bad = entries[2]
    assert bad["key"] == f"slot {SLOTS[2]}" and bad["slot_ms"] == SLOTS[2]
    assert "has slot 'abc'" in bad["error"]


def test_cli_history_filters_keep_the_damaged_row(damaged_url: str) -> None:
    result = invoke("history", damaged_url, "j", "--json", "--status", "failed")
    entries = json.loads(result.stdout)
    assert [e["status"] for e in entries] == ["damaged"]
    assert result.exit_code == EXIT_STORE_CORRUPT


def test_cli_status_shows_every_job_and_names_the_bad_row(damaged_url: str) -> None:
    store = MemoryStore.create(damaged_url.removeprefix("memory://"))
    fill(store, "k", SLOTS[:2])
    result = invoke("status", damaged_url, "--once")
    assert result.exit_code == EXIT_STORE_CORRUPT, result.output
    assert "4 skipped (last 4)" in result.stdout  # j: the good runs are counted
    assert "2 skipped (last 2)" in result.stdout  # k: untouched
    assert "damaged" in result.stdout
    assert "has slot 'abc'" in " ".join(result.stdout.split())  # the note under the table
    assert "cannot be read" in result.stderr

    result = invoke("status", damaged_url, "--json")
    assert result.exit_code == EXIT_STORE_CORRUPT, result.output
    jobs = {j["job"]: j for j in json.loads(result.stdout)["jobs"]}
    assert jobs["j"]["counts"] == {"skipped": 4}
    (bad,) = jobs["j"]["damaged"]
    assert bad["status"] == "damaged" and "has slot 'abc'" in bad["error"]
    assert jobs["k"]["damaged"] == [] and jobs["k"]["counts"] == {"skipped": 2}


def test_cli_shows_stored_text_as_text_not_markup() -> None:
    """A holder or an error with rich markup in it is printed as it is, never crashes."""
    url, store = shared_memory()
    fill(store, "j", SLOTS[:1])
    store.damage("j", SLOTS[0], holder="[/bold]", error="[red]x[/]")
    for args in (("history", url, "j"), ("status", url, "--once")):
        result = invoke(*args)
        assert result.exit_code == 0, result.output
        assert "[/bold]" in result.stdout


# -- health ---------------------------------------------------------------------------------------


def damage_floor(store: Any, job: str, value: object) -> None:
    """Write `value` as the job's floor (L11) behind the store's back."""
    if isinstance(store, MemoryStore):
        store.damage(job, None, floor=value)
        return
    conn = sqlite3.connect(store.path, isolation_level=None)
    try:
        conn.execute(
            "INSERT INTO anarchon_jobs (prefix, job, floor) VALUES (?, ?, ?) "
            "ON CONFLICT (prefix, job) DO UPDATE SET floor = excluded.floor",
            (store.options.prefix, job, value),
        )
    finally:
        conn.close()


@pytest.fixture(params=["memory", "sqlite"])
def store(request: pytest.FixtureRequest, tmp_path: Path) -> Any:
    if request.param == "memory":
        return MemoryStore.create()
    from anarchon_sqlite import SQLiteStore

    return SQLiteStore.create(tmp_path / "damaged.db")


@pytest.mark.slow
async def test_a_corrupt_floor_makes_the_instance_not_ready_until_a_claim_succeeds(
    store: Any,
) -> None:
    s = Scheduler(store, instance="a", environ={})
    ran: dict[str, list[int]] = {"tick": [], "tock": []}

    for name, slots in ran.items():

        @s.job("* * * * * *", name=name, max_late="500ms")
        def job(run: Run, slots: list[int] = slots) -> None:
            slots.append(run.slot)

    async with s:
        await eventually(lambda: s.health().ready and bool(ran["tick"]), 10, "a first run")
        damage_floor(store, "tick", "bad")
        await eventually(lambda: not s.health().ready, 5, "not ready")
        health = s.health()
        assert health.store_reachable, "the store answers: it is not an outage"
        assert list(health.damaged_jobs) == ["tick"]
        assert "floor of job 'tick'" in health.damaged_jobs["tick"]
        assert "StoreCorrupt" in (health.last_error or "")
        assert health.to_dict()["ready"] is False
        claim = health.last_claims["tick"]
        assert claim.outcome is Outcome.UNKNOWN
        # tock, claimed in the same batch, keeps running.
        seen = len(ran["tock"])
        await eventually(lambda: len(ran["tock"]) >= seen + 2, 5, "tock runs on")
        assert not s.health().ready
        damage_floor(store, "tick", 0)
        await eventually(lambda: s.health().ready, 5, "ready again")
        assert s.health().damaged_jobs == {}


async def test_a_refused_claim_names_its_error_not_none(store: Any) -> None:
    """Every claim reported "late: the store did not answer ... None"."""
    s = Scheduler(store, instance="a", environ={})

    @s.job("* * * * * *", max_late="500ms")
    def tick(run: Run) -> None:
        pass

    async with s:
        damage_floor(store, "tick", "bad")
        await eventually(lambda: "tick" in s.health().damaged_jobs, 5, "a refused claim")
        _, claim = s.last_claims["tick"]
    assert claim.outcome is Outcome.UNKNOWN
    assert not claim.reason.startswith(UNANSWERED)
    assert "StoreCorrupt" in claim.reason and "floor of job 'tick'" in claim.reason
    assert "None" not in claim.reason


# -- fuzz: any damage, anywhere -----------------------------------------------------------------

LONG = os.environ.get("ANARCHON_HYPOTHESIS_PROFILE") == "nightly"
"""The long profile, as the conformance kit names it (``nox -s damaged_store`` sets it)."""


def fuzz(examples: int) -> Callable[[Any], Any]:
    """`examples` in the normal run (derandomized); 25 times as many, fresh, in the long one."""
    return settings(
        max_examples=examples * 25 if LONG else examples,
        derandomize=not LONG,
        database=None,
        deadline=None,
        suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture],
    )


INT64 = 2**63
stored = st.one_of(
    st.none(),
    st.booleans(),
    st.integers(-INT64, INT64 - 1),
    st.sampled_from([0, 1, MAX_ATTEMPTS, MAX_SLOT_MS, SLOT]),
    st.floats(allow_nan=True),
    st.text(max_size=20),
    st.sampled_from([s.value for s in RunStatus]),
    st.binary(max_size=8),
)
"""Values a damaged row may hold where anarchon wrote one of its own."""


@fuzz(300)
@given(values=st.lists(stored, min_size=9, max_size=9), keep=st.sets(st.integers(0, 8)))
@pytest.mark.slow
def test_from_row_reads_or_refuses_any_values(values: list[object], keep: set[int]) -> None:
    row = tuple(GOOD_ROW[i] if i in keep else v for i, v in enumerate(values))
    try:
        record = RunRecord.from_row(row, job="j", where="t.db")
    except StoreCorrupt as exc:
        message = str(exc)
        assert len(message) < 700, message
        assert "remove or repair the row" in message
        assert any(f"has {f} " in message for f in FIELDS) or "no lease_until" in message
        return
    assert 0 <= record.slot <= MAX_SLOT_MS and 0 <= record.attempt <= MAX_ATTEMPTS
    assert 0 <= record.fencing_token < INT64


@pytest.fixture(scope="module")
def fuzz_db(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tmp_path_factory.mktemp("damage") / "anarchon.db"


@fuzz(40)
@given(row=st.integers(0, 4), column=st.sampled_from(FIELDS), value=stored)
@pytest.mark.slow
def test_any_damage_to_a_sqlite_row_leaves_the_others_readable(
    fuzz_db: Path, row: int, column: str, value: object
) -> None:
    """History, ``anarchon history`` and ``anarchon status``: the untouched rows always come
    back; the damaged one is a run (the value happened to be valid) or named as damaged."""
    from anarchon_sqlite import SQLiteStore

    job = "f" + uuid.uuid4().hex[:12]  # a job of its own: examples may repeat

    async def claims() -> None:
        async with SQLiteStore.create(fuzz_db) as store:
            await store.open()
            for slot in SLOTS:
                await store.claim(
                    ClaimRequest(
                        job=job,
                        slot=slot,
                        instance="i",
                        max_late_ms=MAX_SLOT_MS,
                        skip_reason="p: x",
                    )
                )

    asyncio.run(claims())
    conn = sqlite3.connect(fuzz_db, isolation_level=None)
    try:
        conn.execute(
            f"UPDATE anarchon_runs SET {column} = ? WHERE job = ? AND slot = ?",
            (value, job, SLOTS[row]),
        )
    except (sqlite3.IntegrityError, OverflowError):
        assume(False)  # a NOT NULL column, or a slot that another row has
    finally:
        conn.close()
    untouched = {s for i, s in enumerate(SLOTS) if i != row}
    url = f"sqlite:///{fuzz_db}"
    result = invoke("history", url, job, "--json")
    assert result.exit_code in (0, EXIT_STORE_CORRUPT), result.output
    entries = json.loads(result.stdout)
    assert len(entries) == len(SLOTS)
    assert untouched <= {e["slot_ms"] for e in entries if e["status"] != "damaged"}
    damaged = [e for e in entries if e["status"] == "damaged"]
    assert len(damaged) == (result.exit_code == EXIT_STORE_CORRUPT)
    result = invoke("status", url, "--job", job, "--once")
    assert result.exit_code in (0, EXIT_STORE_CORRUPT), result.output
    assert "Traceback" not in result.output and "unexpected" not in result.output
