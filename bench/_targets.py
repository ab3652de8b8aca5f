"""One class per backend and strategy: how to open its store, its floor on the same connection,
and how to make a claim win or lose.

A target's `url(prefix)` builds further stores of the same kind (contention claimers, scale
instances in other processes); `setup` opens the target's own store and prepares the floor,
`teardown` deletes everything the run wrote (schema, keys, streams, queues), and `forget`
deletes a scale phase's runs where the store would otherwise keep them (RabbitMQ's queues).
"""

from __future__ import annotations

import abc
import asyncio
import contextlib
import importlib
import os
import socket
import sys
import time
import uuid
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any, ClassVar
from urllib.parse import urlsplit

from anarchon import ClaimRequest, ClaimStore, Outcome, Overlap, create_store

from ._proc import prepare_slot

__all__ = ["ALL_BACKENDS", "Env", "Target", "make_targets"]

ALL_BACKENDS = ("sqlite", "postgres", "redis", "nats", "rabbitmq")

LEASE_MS = 3_600_000
MAX_LATE_MS = 100_000
"""Every benchmark slot is within the last 100 s; RabbitMQ and NATS remember longer."""


def wall_ms() -> int:
    return time.time_ns() // 1_000_000


class Env:
    """Where the services are (the test suites' variables) and a scratch folder."""

    def __init__(self, tmp: Path) -> None:
        self.tmp = tmp
        self.postgres = os.environ.get(
            "ANARCHON_TEST_POSTGRES_URL", "postgresql://postgres@127.0.0.1:5432/test"
        )
        self.redis = os.environ.get("ANARCHON_TEST_REDIS_URL", "redis://127.0.0.1:6379/0")
        self.amqp = os.environ.get("ANARCHON_TEST_AMQP_URL", "amqp://guest:guest@127.0.0.1:5672/")
        self.nats = os.environ.get("ANARCHON_TEST_NATS_URL", "nats://127.0.0.1:4222")


def _answers(url: str, default_port: int) -> str | None:
    """None when something listens at the URL's host and port, else why not."""
    parts = urlsplit(url)
    host, port = parts.hostname or "127.0.0.1", parts.port or default_port
    try:
        with socket.create_connection((host, port), timeout=1):
            return None
    except OSError as exc:
        return f"{parts.scheme}://{host}:{port} does not answer ({exc.strerror or exc})"


def _missing(module: str) -> str | None:
    try:
        importlib.import_module(module)
    except ImportError as exc:
        return f"{module} is not importable ({exc})"
    return None


def _join(url: str, **query: object) -> str:
    sep = "&" if "?" in url else "?"
    return url + sep + "&".join(f"{k}={v}" for k, v in query.items())


class Target(abc.ABC):
    """One backend (and strategy) under test."""

    backend: ClassVar[str]
    floor_name: ClassVar[str]
    latency_target: ClassVar[float]
    """Most a won claim's median may cost, as a multiple of the floor's median (issue 9)."""
    lost_in_target: ClassVar[bool] = True
    """The latency target holds for a lost claim too (False where a loss is, by design, more
    than one round trip)."""
    scale_target_s: ClassVar[float]
    """Most 10,000 jobs of one slot may take on one instance (issue 9)."""
    leases: bool = False
    in_flight: int | None = None
    """Most claims a batch may send at once without claim_many (None: all at once, as the
    scheduler does)."""
    per_job_state: ClassVar[bool] = True
    """The store keeps per-job state (rows, keys) that a first claim creates: scale warms it."""
    slots_ahead_ms: ClassVar[int] = 0
    """Claim slots this far in the future instead of 5 s in the past: a store that prepares
    slots (`SupportsPrepare`) prepares only slots that have not come yet."""

    def slot_base(self) -> int:
        """Where the benchmark's slots start."""
        return wall_ms() + self.slots_ahead_ms if self.slots_ahead_ms else wall_ms() - 5_000

    def __init__(self, env: Env, strategy: str = "") -> None:
        self.env = env
        self.strategy = strategy
        self.run_id = uuid.uuid4().hex[:8]
        self.store: Any = None
        self.prefixes: list[str] = []
        self._wins = 0
        self._prepared = 0

    @property
    def name(self) -> str:
        return f"{self.backend}/{self.strategy}" if self.strategy else self.backend

    # -- availability and stores ------------------------------------------------------------
    @abc.abstractmethod
    def unavailable(self) -> str | None:
        """Why this target cannot run here, or None."""

    @abc.abstractmethod
    def url(self, prefix: str) -> str:
        """The URL of a store of this kind under `prefix` (builds instances anywhere)."""

    def prefix(self, phase: str) -> str:
        prefix = f"b{self.run_id}{phase}"
        self.prefixes.append(prefix)
        return prefix

    def new_store(self, prefix: str) -> ClaimStore:
        return create_store(self.url(prefix))

    async def setup(self) -> None:
        self.store = self.new_store(self.prefix("lat"))
        await self.store.open()
        await self.prepare_floor()
        self.base = self.slot_base()
        holder = self.request("held", self.base, "bench:holder")
        first = await self.store.claim(holder)
        assert first.won, first
        self.held = self.request("held", self.base, "bench:backup")

    async def teardown(self) -> None:
        if self.store is not None:
            await self.store.close()
            self.store = None

    async def forget(self, prefix: str, runs: Sequence[tuple[str, int]]) -> None:
        """Delete what the runs ``(job, slot)`` of a scale phase left in the store, where it
        would weigh on the next measure and `teardown` would not reach it. Nothing by default."""
        del prefix, runs

    # -- the measured operations ---------------------------------------------------------------
    @abc.abstractmethod
    async def prepare_floor(self) -> None:
        """Create what the floor operation needs, on the store's own connection."""

    @abc.abstractmethod
    async def floor(self) -> None:
        """The store's cheapest comparable write (or round trip), on the store's connection."""

    @staticmethod
    def request(job: str, slot: int, instance: str) -> ClaimRequest:
        return ClaimRequest(
            job=job,
            slot=slot,
            instance=instance,
            lease_ms=LEASE_MS,
            max_late_ms=MAX_LATE_MS,
            overlap=Overlap.ALLOW,
        )

    def win_request(self) -> ClaimRequest:
        """A new run each time: 50 jobs, each claiming its next slot in turn (slots of a job only
        grow, as stream-id needs)."""
        i = self._wins
        self._wins += 1
        return self._win_at(i)

    def _win_at(self, i: int) -> ClaimRequest:
        return self.request(f"w{i % 50}", self.base + 1 + i // 50, "bench:winner")

    prepare_lead: ClassVar[int] = 0
    """Won runs prepared ahead of their claim: the scheduler prepares a slot `prepare_ahead_ms`
    (a minute) before it, so a store's preparation may leave work to the server that a claim
    right behind it would wait for."""

    async def ready(self, request: ClaimRequest) -> None:
        """What the scheduler does before a slot comes, untimed: `SupportsPrepare.prepare`, of
        this run (`request`, the last `win_request`) or, with a `prepare_lead`, of the runs that
        many claims ahead."""
        if not self.prepare_lead:
            await prepare_slot(self.store, [request.job], request.slot)
            return
        while self._prepared < self._wins + self.prepare_lead:
            ahead = self._win_at(self._prepared)
            await prepare_slot(self.store, [ahead.job], ahead.slot)
            self._prepared += 1

    async def win(self, request: ClaimRequest) -> None:
        claim = await self.store.claim(request)
        assert claim.won, claim

    async def lose(self) -> None:
        claim = await self.store.claim(self.held)
        assert claim.outcome in (Outcome.RUNNING, Outcome.LOST), claim


class SQLiteTarget(Target):
    backend = "sqlite"
    floor_name = "UPDATE (same file, same thread)"
    latency_target = 1.2
    scale_target_s = 0.1
    leases = True

    def unavailable(self) -> str | None:
        return _missing("anarchon_sqlite")

    def url(self, prefix: str) -> str:
        return f"sqlite:///{self.env.tmp / f'bench-{self.run_id}.db'}?prefix={prefix}"

    async def prepare_floor(self) -> None:
        import sqlite3

        def setup(conn: sqlite3.Connection) -> None:
            conn.execute("CREATE TABLE IF NOT EXISTS bench_floor (id INTEGER PRIMARY KEY, n INT)")
            conn.execute("INSERT OR IGNORE INTO bench_floor VALUES (1, 0)")

        self._run: Callable[..., Any] = self.store._worker.run  # the store's own thread
        await self._run(setup)

        def update(conn: sqlite3.Connection) -> None:
            conn.execute("UPDATE bench_floor SET n = n + 1 WHERE id = 1")

        self._update = update

    async def floor(self) -> None:
        await self._run(self._update)


class PostgresTarget(Target):
    backend = "postgres"
    floor_name = "autocommit one-row UPDATE (the store's client path)"
    latency_target = 1.3
    scale_target_s = 0.2
    leases = True

    def __init__(self, env: Env, strategy: str = "") -> None:
        super().__init__(env, strategy)
        self.schema = f"bench_{self.run_id}"

    def unavailable(self) -> str | None:
        return _missing("anarchon_postgres") or _answers(self.env.postgres, 5432)

    def url(self, prefix: str) -> str:
        return _join(self.env.postgres, schema=self.schema, prefix=prefix, pool_max_size=1)

    async def prepare_floor(self) -> None:
        from psycopg import sql

        table = sql.Identifier(self.schema, "bench_floor")
        pool = self.store._db.pool  # the store's pool (anarchon_postgres._connection)
        async with pool.connection() as conn:
            await conn.execute(
                sql.SQL("CREATE TABLE {} (id int PRIMARY KEY, n bigint)").format(table)
            )
            await conn.execute(sql.SQL("INSERT INTO {} VALUES (1, 0)").format(table))
        async with pool.connection() as conn:
            # Rendered once, as the store renders its own statements.
            self._update = sql.SQL("UPDATE {} SET n = n + 1 WHERE id = 1").format(table)
            self._update_bytes = self._update.as_bytes(conn)

    async def floor(self) -> None:
        # On the store's own client path (pool getconn/putconn, its cursor), the strictest
        # like-for-like: the ratio is the server's work and the protocol, not client paths.
        async def step(cur: Any) -> None:
            await cur.execute(self._update_bytes)

        await self.store._db.run(step)

    async def teardown(self) -> None:
        await super().teardown()
        from anarchon_postgres import testing

        await asyncio.to_thread(testing.drop, self.env.postgres, self.schema)


class RedisTarget(Target):
    backend = "redis"
    floor_name = "PING (the store's wire path)"
    latency_target = 1.3
    scale_target_s = 0.1

    def __init__(self, env: Env, strategy: str = "lease") -> None:
        super().__init__(env, strategy)
        self.leases = strategy == "lease"
        self.server = env.redis

    def unavailable(self) -> str | None:
        missing = _missing("anarchon_redis")
        if missing:
            return missing
        if self.strategy == "idmp":
            servers = redis_servers()
            url = servers.private_server_url("redis86")
            if url is None:
                return str(servers.missing_server_reason("redis86"))
            self.server = url
        return _answers(self.server, 6379)

    def url(self, prefix: str) -> str:
        return _join(self.server, strategy=self.strategy, prefix=prefix)

    async def prepare_floor(self) -> None:
        from anarchon_redis import _wire

        self._send = _wire.send
        self._pool = self.store.client.connection_pool
        self._ping = _wire.command(["PING"])

    async def floor(self) -> None:
        # PING the way the store sends its claims (packed once, on a connection of its pool),
        # not through redis-py's generic path, which costs a PING some 20 % more: the ratio is
        # then the server's work and the reply, not client paths (bench/redis_latency.py gives
        # both).
        await self._send(self._pool, [self._ping])

    async def teardown(self) -> None:
        if self.store is not None:
            from anarchon_redis import testing

            for prefix in self.prefixes:
                await testing.delete_prefix(self.store.client, prefix)
        await super().teardown()


def redis_servers() -> Any:
    """The private Redis servers' launcher of anarchon-redis's tests (``redis_servers.py`` in
    its test tree: test support, not in the wheel), for the idmp target's Redis 8.6."""
    tests = str(Path(__file__).resolve().parents[1] / "anarchon-redis" / "tests")
    if tests not in sys.path:
        sys.path.append(tests)
    return importlib.import_module("redis_servers")


class NATSTarget(Target):
    backend = "nats"
    floor_name = "nats-py JetStream publish (same stream)"
    latency_target = 1.1
    # A loss reads the stored claim back to compare tokens (C2, as issue 7 asks): two round trips.
    lost_in_target = False
    scale_target_s = 0.5
    per_job_state = False

    def unavailable(self) -> str | None:
        return _missing("anarchon_nats._store") or _answers(self.env.nats, 4222)

    def url(self, prefix: str) -> str:
        return _join(self.env.nats, strategy=self.strategy, prefix=prefix)

    async def prepare_floor(self) -> None:
        self._js = self.store._opened().js  # the store's own connection (its `Link`)
        self._floors = 0

    async def floor(self) -> None:
        # A plain publish (no de-duplication header) to a subject of the claims' own stream,
        # with nats-py's JetStream publish: issue 7's reference floor. A claim takes a leaner
        # path of its own; bench/nats_latency.py gives the ratio to a bare publish on that path.
        self._floors += 1
        subject = self.store.strategy.subject("floor", self._floors)
        await self._js.publish(subject, b"x")

    async def teardown(self) -> None:
        if self.store is not None:
            js = self.store._opened().js
            for prefix in self.prefixes:
                with contextlib.suppress(Exception):  # a phase may not have created it
                    await js.delete_stream(f"ANARCHON_{prefix}")
        await super().teardown()


class RabbitMQTarget(Target):
    backend = "rabbitmq"
    floor_name = "publish + confirm (existing queue)"
    latency_target = 3.0
    scale_target_s = 5.0
    per_job_state = False
    slots_ahead_ms = 140_000
    prepare_lead = 100  # about 0.3 s: the queue's warm-up is stored before its claim comes

    def unavailable(self) -> str | None:
        return _missing("anarchon_rabbitmq._store") or _answers(self.env.amqp, 5672)

    def url(self, prefix: str) -> str:
        # Queues expire slot_ttl after their creation; a run is remembered slot_ttl -
        # prepare_ahead (150 s) after its slot, longer than the benchmark's MAX_LATE_MS. The lead
        # is long enough to prepare 10,000 queues before the scale phase's slots.
        return _join(self.env.amqp, prefix=prefix, slot_ttl_ms=300_000, prepare_ahead_ms=150_000)

    async def prepare_floor(self) -> None:
        self._queue = f"{self.prefixes[-1]}.floor"
        channel = await self.store._link.channel()
        await channel.queue_declare(self._queue, durable=True, arguments={"x-expires": 120_000})

    async def floor(self) -> None:
        # A transient publish, as issue 7's reference floor (its naive claim measured 12.9x);
        # bench/rabbitmq_latency.py gives the ratios to a persistent publish too.
        channel = await self.store._link.channel()  # the claims' channels, in the same turn
        await channel.basic_publish(b"x", routing_key=self._queue, mandatory=True)

    async def teardown(self) -> None:
        if self.store is not None:
            channel = await self.store._link.channel()
            await channel.queue_delete(self._queue)
            # The latency phase's runs: the held one, and every won run claimed or prepared.
            won = [self._win_at(i) for i in range(max(self._wins, self._prepared))]
            runs = [(self.held.job, self.held.slot), *((r.job, r.slot) for r in won)]
            await self.forget(self.store.options.prefix, runs)
        await super().teardown()

    async def forget(self, prefix: str, runs: Sequence[tuple[str, int]]) -> None:
        # A broker keeping tens of thousands of queues (until they expire, 5 min after their
        # creation) makes each persistent message cost it more: the next measure would pay.
        import aiormq

        from anarchon_rabbitmq import queue_name

        connection = await aiormq.connect(self.env.amqp)
        try:
            channel = await connection.channel()
            for start in range(0, len(runs), 500):
                for job, slot in runs[start : start + 500]:
                    await channel.queue_delete(queue_name(prefix, job, slot), nowait=True)
                await channel.basic_qos(prefetch_count=0)  # a round trip: the deletes are done
        finally:
            await connection.close()


def make_targets(env: Env) -> list[Target]:
    return [
        SQLiteTarget(env),
        PostgresTarget(env),
        RedisTarget(env, "lease"),
        RedisTarget(env, "stream-id"),
        RedisTarget(env, "script"),
        RedisTarget(env, "idmp"),
        NATSTarget(env, "msg-id"),
        NATSTarget(env, "expected-seq"),
        RabbitMQTarget(env),
    ]
