"""The packed request and answer of the claim functions: what goes in, what comes back, and
what happens when the answer is not one (`StoreCorrupt` naming the table, never a claim)."""

from __future__ import annotations

import asyncio
import time

import psycopg
import pytest

from anarchon import Claim, ClaimRequest, Outcome, Overlap, StoreCorrupt
from anarchon_postgres import PostgresStore
from anarchon_postgres._batch import read_slot_answers
from anarchon_postgres._plpgsql import lock_timeout_setting
from anarchon_postgres._rows import claim_from_answer

from .conftest import POSTGRES_URL, require_server, url_with

WHERE = "table cron.anarchon_runs at postgresql://db/app"
TOKEN = "ab" * 16
REQUEST = ClaimRequest(job="sync", slot=1_000_000, instance="a", max_late_ms=60_000)


@pytest.mark.parametrize(
    "answer",
    [
        None,
        42,
        "",
        "won",
        "won 1 1060000 running 1000000",  # too few fields
        "won one 1060000 running 1000000  " + TOKEN + " a",  # attempt not a number
        "running 1  running 1000000  " + TOKEN + " b",  # a live lease without its end
        "won 1 1060000 running 1000000   a",  # a run without its token
        "late 0   soon   ",  # now not a number
        "paused 1 1060000 running 1000000  " + TOKEN + " b",  # an outcome never written
        "overlap 0   1000000   ",  # an outcome of older bodies, never answered now
        "skipped 0  skipped 1000000  " + TOKEN + " b",  # a skip without its reason
        "skipped 0  running 1000000  " + TOKEN + " b\noverlap: x",  # a skip that is running
        "skipped 0  skipped 1000000   b\nlate: x",  # a skip without its token
    ],
)
def test_an_answer_that_is_not_one_is_corrupt_naming_the_table(answer: object) -> None:
    with pytest.raises(StoreCorrupt) as info:
        claim_from_answer(answer, REQUEST, WHERE)
    assert "the claim function of table cron.anarchon_runs at postgresql://db/app" in str(
        info.value
    )


def test_answers_become_claims_with_memory_words() -> None:
    won = claim_from_answer(f"won 2 1060000 running 1000000  {TOKEN} host a: 1", REQUEST, WHERE)
    assert (won.outcome, won.attempt, won.lease_until, won.token, won.holder) == (
        Outcome.WON,
        2,
        1_060_000,
        TOKEN,
        "host a: 1",
    )
    late = claim_from_answer("late 0   1070000   ", REQUEST, WHERE)
    assert (late.outcome, late.reason) == (
        Outcome.LATE,
        "late: slot is 70000 ms old, max_late is 60000 ms",
    )
    forgotten = claim_from_answer("late 0   1000001 1000000  ", REQUEST, WHERE)
    assert forgotten.reason.startswith("forgotten: slot 1000000 is at or below")
    done = claim_from_answer(f"done 1 1060000 failed 1000001  {TOKEN} b", REQUEST, WHERE)
    assert (done.outcome, done.reason, done.holder) == (Outcome.DONE, "run failed", "b")
    reason = "overlap: slot 999000 of this job holds a live lease and overlap is 'skip'"
    skipped = claim_from_answer(
        f"skipped 0  skipped 1000001  {TOKEN} web\n1: a\n{reason}", REQUEST, WHERE
    )
    assert skipped == Claim(
        outcome=Outcome.SKIPPED, attempt=0, token=TOKEN, holder="web\n1: a", reason=reason
    )


def test_a_batch_answer_that_is_not_one_per_request_is_corrupt() -> None:
    batch = [
        ClaimRequest(job="a", slot=1_000_000, instance="x"),
        ClaimRequest(job="b", slot=1_000_000, instance="x"),
    ]
    running = f"running 1 1060000 running 1000000  {TOKEN} y"
    claims = read_slot_answers([(0, "1000000 2"), (1, running)], batch, WHERE)
    assert [c.outcome for c in claims] == [Outcome.RUNNING, Outcome.WON]
    assert (claims[1].token, claims[1].holder, claims[1].lease_until) == (
        batch[1].token,
        "x",
        1_060_000,
    )
    for rows in (
        [(0, "1000000 1 2"), (1, running)],  # a request answered twice
        [(0, "1000000 3")],  # no such request
        [(0, "1000000 -1 1")],
        [(0, "soon 1 2")],
        [(0, "1000000 1")],  # a request not answered
        [(3, running), (0, "1000000 1 2")],
        [(1, None), (0, "1000000 2")],
    ):
        with pytest.raises(StoreCorrupt, match=r"table cron\.anarchon_runs"):
            read_slot_answers(rows, batch, WHERE)


def test_the_lock_timeout_is_sent_as_the_server_shows_it() -> None:
    require_server()
    values = [1, 999, 1000, 1500, 30_000, 60_000, 90_000, 3_600_000, 86_400_000]
    with psycopg.connect(POSTGRES_URL, autocommit=True) as conn:
        for ms in values:
            conn.execute(f"SET lock_timeout = {ms}")
            shown = conn.execute("SELECT current_setting('lock_timeout')").fetchone()
            assert shown == (lock_timeout_setting(ms),), ms
    assert lock_timeout_setting(0) == "0"


async def test_a_holder_with_spaces_comes_back_whole(pg_store: PostgresStore) -> None:
    now = await pg_store.now_ms()
    holder = "web 1:  pid 7 "
    assert (await pg_store.claim(ClaimRequest(job="sync", slot=now, instance=holder))).won
    lost = await pg_store.claim(ClaimRequest(job="sync", slot=now, instance="b"))
    assert (lost.outcome, lost.holder) == (Outcome.RUNNING, holder)
    batch = [ClaimRequest(job=j, slot=now, instance=holder) for j in ("x", "y")]
    assert all(c.won and c.holder == holder for c in await pg_store.claim_many(batch))
    again = await pg_store.claim_many([ClaimRequest(job=j, slot=now, instance="b") for j in "xy"])
    assert [(c.outcome, c.holder) for c in again] == [(Outcome.RUNNING, holder)] * 2
    assert (await pg_store.history("x"))[0].holder == holder
    # A batch of several slots goes through the claim function once per request.
    mixed = [ClaimRequest(job="z", slot=now - 1000, instance=holder), *batch]
    assert [(c.outcome, c.holder) for c in await pg_store.claim_many(mixed)] == [
        (Outcome.WON, holder),
        (Outcome.WON, holder),
        (Outcome.WON, holder),
    ]


@pytest.mark.parametrize(
    ("holder", "inline"),
    [
        ("it's a \\ back%slash, $$ and $1 %s", True),
        ("h\u00e9te \u6771\u4eac", True),
        ("web $q$ 1", False),  # holds the inline quote: sent as a parameter
        ("web $q$::text); DROP TABLE x; --", False),
        ("web $q", False),  # the literal would end at its own "$q" and the closing "$"
        ("web $", True),
    ],
)
async def test_a_claim_sent_inline_carries_any_holder(
    pg_store: PostgresStore, holder: str, inline: bool
) -> None:
    """A single claim goes as one statement with the request inline (dollar-quoted), or as a
    parameter when the request holds the quote: either way the holder comes back as sent."""
    now = await pg_store.now_ms()
    request = ClaimRequest(job="sync", slot=now, instance=holder)
    _, params = pg_store._claim_call(pg_store._packed(request))
    assert (params is None) is inline
    won = await pg_store.claim(request)
    assert (won.outcome, won.holder) == (Outcome.WON, holder)
    lost = await pg_store.claim(ClaimRequest(job="sync", slot=now, instance="b"))
    assert (lost.outcome, lost.holder, lost.token) == (Outcome.RUNNING, holder, request.token)
    assert (await pg_store.history("sync"))[0].holder == holder


async def test_the_connection_has_the_lock_timeout(schema: str) -> None:
    store = PostgresStore.create(url_with(schema), statement_timeout_ms=1500)
    await store.open()
    try:
        row = await store._fetchone(b"SELECT current_setting('lock_timeout')", None)
        assert row == ("1500ms",)
    finally:
        await store.close()


async def test_a_claim_bounds_its_lock_wait_without_the_connection_setting(
    pg_store: PostgresStore,
) -> None:
    """Through PgBouncer the connection's settings are not passed on: the claim function sets the
    lock timeout itself. Here a plain connection (no lock timeout) calls it while another
    transaction holds the job's row lock."""
    now = await pg_store.now_ms()
    assert (await pg_store.claim(ClaimRequest(job="sync", slot=now, instance="a"))).won
    packed = PostgresStore.create(url_with(pg_store.options.schema), statement_timeout_ms=300)
    request = packed._packed(
        ClaimRequest(job="sync", slot=now + 1000, instance="b", overlap=Overlap.ALLOW)
    )
    claim = f'SELECT "{pg_store.options.schema}".anarchon_runs_claim(%s::text, NULL)'
    lock = (
        f'SELECT 1 FROM "{pg_store.options.schema}".anarchon_runs_jobs '
        "WHERE prefix = 'cron' AND job = 'sync' FOR UPDATE"
    )

    def wait_for_the_lock() -> float:
        with (
            psycopg.connect(POSTGRES_URL) as holder,
            psycopg.connect(POSTGRES_URL, autocommit=True) as plain,
        ):
            holder.execute(lock)  # the row stays locked until this transaction ends
            assert plain.execute("SELECT current_setting('lock_timeout')").fetchone() == ("0",)
            started = time.monotonic()
            with pytest.raises(psycopg.errors.LockNotAvailable):
                plain.execute(claim, (request,))  # type: ignore[call-overload]
            waited = time.monotonic() - started
            holder.rollback()
            # Unlocked, the same request wins: it was the lock it waited for.
            answer = plain.execute(claim, (request,)).fetchone()  # type: ignore[call-overload]
            assert answer is not None and str(answer[0]).startswith("won 1 ")
            return waited

    waited = await asyncio.to_thread(wait_for_the_lock)
    assert 0.25 <= waited < 5
