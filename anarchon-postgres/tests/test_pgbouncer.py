"""`postgresql://` through PgBouncer in transaction mode (issue 6): the conformance kit, and the
store's own paths where session state would show, on a real PgBouncer (see `pgbouncer.py`).

PgBouncer gives each transaction whichever of its `POOL_SIZE` server connections is free, so
every claim, batch and schema creation below runs on server connections that other clients used
just before. The backdoors and the transactions that hold locks go straight to the server: the
oracle does not share the path under test.
"""

from __future__ import annotations

import asyncio
import time
from collections import Counter
from collections.abc import AsyncIterator, Callable, Iterator
from typing import Any, ClassVar

import psycopg
import pytest
from psycopg import sql
from psycopg.conninfo import conninfo_to_dict

from anarchon import ClaimRequest, Outcome, Overlap, RunRecord, RunStatus, StoreUnavailable
from anarchon_conformance import ConformanceSuite
from anarchon_postgres import SCHEMA_VERSION, PostgresStore, testing

from .conftest import POSTGRES_URL, url_with
from .pgbouncer import POOL_SIZE, PgBouncer, binary
from .test_conformance import PostgresHarness

TABLE = "anarchon_runs"


# -- the conformance kit through PgBouncer ------------------------------------------------------
class PgBouncerHarness(PostgresHarness):
    """The stores reach the server through the session's PgBouncer; the kit's fault proxy goes in
    front of PgBouncer. Every check of the kit applies: none restarts the server (the reconnect
    checks drop connections at the proxy)."""

    name = "postgres via PgBouncer"
    bouncer: ClassVar[PgBouncer]

    def url(self, address: tuple[str, int] | None = None) -> str:
        return super().url(address or ("127.0.0.1", self.bouncer.port))

    def address(self) -> tuple[str, int] | None:
        return ("127.0.0.1", self.bouncer.port)

    async def server_version(self) -> str:
        bouncer = await asyncio.to_thread(self.bouncer.version)
        return f"{await super().server_version()} through {bouncer} (transaction pooling)"


class TestPostgresConformanceThroughPgBouncer(ConformanceSuite):
    harness_class = PgBouncerHarness

    @pytest.fixture(autouse=True)
    def _through(self, pgbouncer: PgBouncer) -> None:
        PgBouncerHarness.bouncer = pgbouncer


# -- the store's paths through PgBouncer --------------------------------------------------------
@pytest.fixture
def through(pgbouncer: PgBouncer, schema: str) -> Callable[..., PostgresStore]:
    """Stores (not opened) on a fresh schema, through the session's PgBouncer."""

    def make(**options: Any) -> PostgresStore:
        return PostgresStore.create(url_with(schema, pgbouncer.url), **options)

    return make


@pytest.fixture
async def opened() -> AsyncIterator[list[PostgresStore]]:
    """Stores to close after the test."""
    stores: list[PostgresStore] = []
    yield stores
    for store in stores:
        await store.close()


async def open_all(stores: list[PostgresStore], opened: list[PostgresStore]) -> None:
    opened.extend(stores)
    await asyncio.gather(*(s.open() for s in stores))


def request(job: str, slot: int, **kw: object) -> ClaimRequest:
    kw.setdefault("max_late_ms", 3_600_000)
    kw.setdefault("overlap", Overlap.ALLOW)
    kw.setdefault("instance", "test:1:aaaa")
    return ClaimRequest(job=job, slot=slot, **kw)  # type: ignore[arg-type]


def raw(schema: str, job: str, slot: int) -> RunRecord | None:
    return testing.raw_run(POSTGRES_URL, schema, TABLE, "cron", job, slot)


async def test_C1_stores_and_tasks_share_two_server_connections(
    pgbouncer: PgBouncer,
    schema: str,
    through: Callable[..., PostgresStore],
    opened: list[PostgresStore],
) -> None:
    """6 stores of 5 connections each, 8 tasks per store per slot, on 2 server connections."""
    stores = [through(pool_min_size=5, pool_max_size=5) for _ in range(6)]
    await open_all(stores, opened)
    clients = [c for c in pgbouncer.show("CLIENTS") if c["database"] == pgbouncer.dbname]
    assert len(clients) >= 30 > POOL_SIZE
    base = await stores[0].now_ms() - 10_000
    slots = [base + i * 1000 for i in range(8)]
    requests = [
        request("c1", slot, instance=f"i{n}:{t}")
        for slot in slots
        for n in range(len(stores))
        for t in range(8)
    ]
    claims = await asyncio.gather(
        *(stores[n % len(stores)].claim(r) for n, r in enumerate(requests))
    )
    winners = Counter(r.slot for r, c in zip(requests, claims, strict=True) if c.won)
    assert winners == dict.fromkeys(slots, 1), f"C1 through PgBouncer: {winners}"
    assert {c.outcome for c in claims} == {Outcome.WON, Outcome.RUNNING}
    for r, c in zip(requests, claims, strict=True):
        if c.won:
            run = raw(schema, "c1", r.slot)
            assert run is not None and run.token == r.token and run.attempt == 1, run
    # A takeover under the same contention: one winner, attempt 2.
    testing.force_expire(POSTGRES_URL, schema, TABLE, "cron", "c1", slots[0])
    again = [request("c1", slots[0], instance=f"t{n}") for n in range(48)]
    claims = await asyncio.gather(*(stores[n % 6].claim(r) for n, r in enumerate(again)))
    won = [c for c in claims if c.won]
    assert len(won) == 1 and won[0].attempt == 2, won
    assert pgbouncer.server_connections() <= POOL_SIZE


async def test_claim_many_of_300_jobs_by_two_stores_at_once(
    schema: str, through: Callable[..., PostgresStore], opened: list[PostgresStore]
) -> None:
    """The batch function (new jobs: their rows are inserted in a statement of their own, then
    the batch is sent again), and the claim function per request for a batch of two slots."""
    stores = [through(), through()]
    await open_all(stores, opened)
    slot = await stores[0].now_ms() - 5000
    jobs = [f"job{n:03}" for n in range(300)]
    batches = [[request(j, slot, instance=f"s{k}") for j in jobs] for k in range(2)]
    results = await asyncio.gather(*(s.claim_many(b) for s, b in zip(stores, batches, strict=True)))
    for n, job in enumerate(jobs):
        won = [b[n] for b, claims in zip(batches, results, strict=True) if claims[n].won]
        assert len(won) == 1, (job, [claims[n] for claims in results])
        run = raw(schema, job, slot)
        assert run is not None and run.token == won[0].token, run
    # Both slots in one batch: the claim function once per request, in one statement.
    mixed = [request(j, s) for j in jobs[:50] for s in (slot, slot + 1000)]
    claims = await stores[1].claim_many(mixed)
    assert [c.outcome for c in claims] == [Outcome.RUNNING, Outcome.WON] * 50


async def test_renew_finish_release_and_history(
    schema: str, through: Callable[..., PostgresStore], opened: list[PostgresStore]
) -> None:
    first, backup = through(), through()
    await open_all([first, backup], opened)
    slot = await first.now_ms() - 1000
    mine = request("life", slot, instance="first", lease_ms=60_000)
    assert (await first.claim(mine)).won
    assert await first.renew("life", slot, mine.token, 120_000)  # L7
    assert (await backup.claim(request("life", slot))).outcome is Outcome.RUNNING  # L3
    assert await first.release("life", slot, mine.token)  # L9: the backup takes over at once
    theirs = request("life", slot, instance="backup")
    takeover = await backup.claim(theirs)
    assert takeover.won and takeover.attempt == 2, takeover  # L4
    assert not await first.renew("life", slot, mine.token, 60_000)  # fenced
    assert not await first.finish("life", slot, mine.token, RunStatus.SUCCEEDED)  # L8
    assert await backup.finish("life", slot, theirs.token, RunStatus.FAILED, "boom")
    assert (await first.claim(mine)).outcome is Outcome.DONE  # L6, C2
    history = await first.history("life")
    assert [(r.slot, r.status, r.attempt, r.holder, r.error) for r in history] == [
        (slot, RunStatus.FAILED, 2, "backup", "boom")
    ]
    assert await first.jobs() == ["life"]


async def test_eight_stores_create_the_schema_at_once(
    through: Callable[..., PostgresStore], opened: list[PostgresStore], schema: str
) -> None:
    """The advisory lock that guards creation is transaction-scoped: PgBouncer keeps the whole
    creation on one server connection, and the other stores wait for it (or for a connection)."""
    stores = [through(pool_min_size=1) for _ in range(8)]
    await open_all(stores, opened)
    slot = await stores[0].now_ms()
    claims = await asyncio.gather(*(s.claim(request("first", slot)) for s in stores))
    assert sum(c.won for c in claims) == 1, claims
    with psycopg.connect(POSTGRES_URL) as conn:
        rows = conn.execute(
            sql.SQL("SELECT component, version FROM {}").format(
                sql.Identifier(schema, f"{TABLE}_schema")
            )
        ).fetchall()
    assert rows == [("postgres", SCHEMA_VERSION)]


# -- a claim waiting for its job's row lock -----------------------------------------------------
LOCK_TIMEOUT_MS = 500


@pytest.fixture(params=["direct", "pgbouncer"])
async def waiting(
    request: pytest.FixtureRequest, schema: str
) -> AsyncIterator[tuple[PostgresStore, str]]:
    """A store whose claims wait at most `LOCK_TIMEOUT_MS` for a lock, and the lock timeout its
    connections have: straight to the server they have it (sent at connect); through PgBouncer,
    which does not pass it on, they have none, and the claim functions set it in their own
    transaction. Either way the claims must behave alike."""
    base, setting = POSTGRES_URL, f"{LOCK_TIMEOUT_MS}ms"
    if request.param == "pgbouncer":
        base, setting = request.getfixturevalue("pgbouncer").url, "0"
    store = PostgresStore.create(url_with(schema, base), statement_timeout_ms=LOCK_TIMEOUT_MS)
    await store.open()
    yield store, setting
    await store.close()


async def lock_jobs(schema: str, *jobs: str) -> psycopg.AsyncConnection[tuple[object, ...]]:
    """A transaction straight to the server holding the jobs' row locks until it ends."""
    holder = await psycopg.AsyncConnection.connect(POSTGRES_URL)
    await holder.execute(
        sql.SQL("SELECT 1 FROM {} WHERE prefix = 'cron' AND job = ANY(%s) FOR UPDATE").format(
            sql.Identifier(schema, f"{TABLE}_jobs")
        ),
        (list(jobs),),
    )
    return holder


async def claim_both(store: PostgresStore, call: str, slot: int) -> list[Outcome]:
    """`call` for the jobs ``locked`` and ``free`` (the batch: both in one claim_many)."""
    requests = [request("locked", slot), request("free", slot)]
    if call == "claim_many":
        return [c.outcome for c in await store.claim_many(requests)]
    return [(await store.claim(r)).outcome for r in requests]


@pytest.mark.parametrize("call", ["claim", "claim_many"])
async def test_a_claim_gives_up_on_a_held_row_lock_after_the_lock_timeout(
    waiting: tuple[PostgresStore, str], schema: str, call: str
) -> None:
    store, setting = waiting
    row = await store._fetchone(b"SELECT current_setting('lock_timeout')", ())
    assert row == (setting,), "the connection is not the one this case is about"
    slot = await store.now_ms() - 10_000
    assert await claim_both(store, call, slot) == [Outcome.WON, Outcome.WON]  # the jobs' rows
    holder = await lock_jobs(schema, "locked")
    try:
        started = time.monotonic()
        with pytest.raises(StoreUnavailable, match="timed out"):  # not asyncio's TimeoutError
            await asyncio.wait_for(claim_both(store, call, slot + 1000), 5)
        waited = time.monotonic() - started
    finally:
        await holder.close()
    assert LOCK_TIMEOUT_MS / 1000 * 0.9 <= waited < 5, waited
    assert raw(schema, "locked", slot + 1000) is None  # nothing was written
    # Unlocked, the same claims win: it was the lock they waited for.
    assert await claim_both(store, call, slot + 1000) == [Outcome.WON, Outcome.WON]


@pytest.mark.parametrize("call", ["claim", "claim_many"])
async def test_a_claim_waits_for_a_row_lock_released_within_the_lock_timeout(
    waiting: tuple[PostgresStore, str], schema: str, call: str
) -> None:
    store, _ = waiting
    slot = await store.now_ms() - 10_000
    assert await claim_both(store, call, slot) == [Outcome.WON, Outcome.WON]
    holder = await lock_jobs(schema, "locked")

    async def release_soon() -> None:
        await asyncio.sleep(LOCK_TIMEOUT_MS / 1000 / 3)
        await holder.close()

    started = time.monotonic()
    outcomes, _ = await asyncio.gather(claim_both(store, call, slot + 1000), release_soon())
    waited = time.monotonic() - started
    assert outcomes == [Outcome.WON, Outcome.WON]
    assert LOCK_TIMEOUT_MS / 1000 / 3 * 0.9 <= waited < LOCK_TIMEOUT_MS / 1000, waited


async def lock_run(schema: str, job: str, slot: int) -> psycopg.AsyncConnection[tuple[object, ...]]:
    """A transaction straight to the server holding the run's row lock until it ends."""
    holder = await psycopg.AsyncConnection.connect(POSTGRES_URL)
    await holder.execute(
        sql.SQL(
            "SELECT 1 FROM {} WHERE prefix = 'cron' AND job = %s AND slot = %s FOR UPDATE"
        ).format(sql.Identifier(schema, TABLE)),
        (job, slot),
    )
    return holder


@pytest.mark.parametrize("call", ["renew", "finish", "release"])
async def test_a_lease_holders_write_gives_up_on_a_held_run_lock_after_the_lock_timeout(
    waiting: tuple[PostgresStore, str], schema: str, call: str
) -> None:
    """renew, finish and release bound their wait for the run's row lock as claims do: through
    the connection's lock timeout, or (through PgBouncer) one set inside their own statement."""
    store, _ = waiting
    slot = await store.now_ms() - 10_000
    won = request("locked", slot)
    assert (await store.claim(won)).won

    async def write() -> bool:
        if call == "renew":
            return await store.renew("locked", slot, won.token, 60_000)
        if call == "finish":
            return await store.finish("locked", slot, won.token, RunStatus.SUCCEEDED)
        return await store.release("locked", slot, won.token)

    holder = await lock_run(schema, "locked", slot)
    try:
        started = time.monotonic()
        with pytest.raises(StoreUnavailable, match="timed out"):
            await asyncio.wait_for(write(), 5)
        waited = time.monotonic() - started
    finally:
        await holder.close()
    assert LOCK_TIMEOUT_MS / 1000 * 0.9 <= waited < 5, waited
    run = raw(schema, "locked", slot)
    assert run is not None and run.status is RunStatus.RUNNING  # nothing was written
    assert await write()  # unlocked, the same write goes through: it was the lock it waited for


# -- PgBouncer's own settings, and what other clients leave behind ------------------------------
@pytest.fixture
def private_pgbouncer(pgbouncer: PgBouncer) -> Iterator[Callable[..., PgBouncer]]:
    """Start PgBouncers of this test's own (the session's one shows PgBouncer is there)."""
    executable = binary()
    assert executable is not None
    started: list[PgBouncer] = []

    def start(**options: bool) -> PgBouncer:
        bouncer = PgBouncer(POSTGRES_URL, **options)
        started.append(bouncer)
        bouncer.start(executable)
        return bouncer

    yield start
    for bouncer in started:
        bouncer.stop()


@pytest.mark.parametrize("zero", [0, "0s", "0ms"])
def test_a_zero_statement_timeout_sends_no_startup_options(zero: object) -> None:
    """What a PgBouncer without ``ignore_startup_parameters = options`` needs (the docs' advice,
    once refused as "duration must be positive")."""
    store = PostgresStore.create("postgresql://app@db.example/app", statement_timeout_ms=zero)
    assert store.options.statement_timeout_ms == 0
    assert "options" not in conninfo_to_dict(store._conninfo)
    assert store._lock_timeout == "0"  # and the claim functions set no lock timeout


async def test_without_ignore_startup_parameters_only_a_zero_timeout_connects(
    private_pgbouncer: Callable[..., PgBouncer], schema: str, opened: list[PostgresStore]
) -> None:
    """The store sends its timeouts in libpq's ``options``, which PgBouncer 1.18 refuses unless
    ``ignore_startup_parameters`` lists it; ``statement_timeout_ms=0`` sends none."""
    bouncer = private_pgbouncer(ignore_options=False)
    store = PostgresStore.create(url_with(schema, bouncer.url))
    with pytest.raises(StoreUnavailable, match="unsupported startup parameter: options"):
        await store.open()
    store = PostgresStore.create(url_with(schema, bouncer.url), statement_timeout_ms=0)
    await open_all([store], opened)
    assert (await store.claim(request("zero", await store.now_ms()))).won


async def test_state_other_clients_leave_on_the_server_connections_does_not_matter(
    private_pgbouncer: Callable[..., PgBouncer], schema: str, opened: list[PostgresStore]
) -> None:
    """Transaction pooling hands a session's ``SET`` to the next client of its server
    connection. With both server connections left with another ``search_path`` and a 1 ms lock
    timeout, the store still creates its schema (every name is qualified) and its claims still
    wait for a lock as long as their own timeout says."""
    bouncer = private_pgbouncer()
    others = [psycopg.connect(bouncer.url) for _ in range(POOL_SIZE)]  # both at once: both servers
    for conn in others:
        conn.execute("SET search_path = nowhere")
        conn.execute("SET lock_timeout = '1ms'")
    for conn in others:
        conn.commit()
        conn.close()
    with psycopg.connect(bouncer.url, autocommit=True) as conn:
        assert conn.execute(
            "SELECT current_setting('search_path'), current_setting('lock_timeout')"
        ).fetchone() == ("nowhere", "1ms")
    store = PostgresStore.create(url_with(schema, bouncer.url), statement_timeout_ms="2s")
    await open_all([store], opened)
    slot = await store.now_ms() - 10_000
    assert await claim_both(store, "claim", slot) == [Outcome.WON, Outcome.WON]
    holder = await lock_jobs(schema, "locked")

    async def release_soon() -> None:
        await asyncio.sleep(0.2)
        await holder.close()

    outcomes, _ = await asyncio.gather(claim_both(store, "claim", slot + 1000), release_soon())
    assert outcomes == [Outcome.WON, Outcome.WON]
