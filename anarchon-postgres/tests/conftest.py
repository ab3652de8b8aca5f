"""Stores for the PostgreSQL tests: the real server at ``ANARCHON_TEST_POSTGRES_URL``.

Each test gets its own schema (dropped afterwards), so tests never see each other's rows. The rule
tests run `memory://` (the reference model) and `postgresql://` side by side on one manual clock,
with the same backdoors (`raw_run`, `force_expire`, `floor`) that bypass the code under test.
"""

from __future__ import annotations

import os
import uuid
from collections.abc import AsyncIterator, Iterator
from pathlib import Path
from typing import Any

import psycopg
import pytest
from psycopg import sql

from anarchon import LeaseStore, MemoryStore, RunRecord
from anarchon_postgres import PostgresStore, testing
from anarchon_test_support import (
    T0,  # noqa: F401 - the rule tests import it from here
    ManualClock,
    mark_services,
)

from .pgbouncer import PgBouncer, missing_reason
from .pgbouncer import binary as pgbouncer_binary

POSTGRES_URL = os.environ.get(
    "ANARCHON_TEST_POSTGRES_URL", "postgresql://postgres@127.0.0.1:5432/test"
)


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """Every test here needs the PostgreSQL server: ``pytest -m "not services"`` leaves them out."""
    mark_services(items, Path(__file__).parent)


def server_error() -> str | None:
    """Why the test server does not answer, or None when it does."""
    try:
        with psycopg.connect(POSTGRES_URL, connect_timeout=5, autocommit=True) as conn:
            conn.execute("SELECT 1")
    except psycopg.Error as exc:
        return str(exc).strip()
    return None


_REASON = server_error()


def require_server() -> None:
    if _REASON is not None:
        pytest.skip(
            f"PostgreSQL at {POSTGRES_URL} does not answer ({_REASON}); start it with "
            "scripts/services or set ANARCHON_TEST_POSTGRES_URL"
        )


def new_schema() -> str:
    return "t_" + uuid.uuid4().hex[:16]


def url_with(schema: str, base: str = POSTGRES_URL, **options: object) -> str:
    query = "&".join(f"{k}={v}" for k, v in {"schema": schema, **options}.items())
    return f"{base}{'&' if '?' in base else '?'}{query}"


@pytest.fixture
def schema() -> Iterator[str]:
    """A fresh schema name, dropped with everything in it after the test."""
    require_server()
    name = new_schema()
    yield name
    testing.drop(POSTGRES_URL, name)


class Harness:
    """Makes stores of one kind that share their runs, and reads them behind their back."""

    def __init__(self, kind: str, schema: str) -> None:
        self.kind = kind
        self.clock = ManualClock()
        self.schema = schema
        self.table = "anarchon_runs"
        self._name = "t" + uuid.uuid4().hex[:12]
        self._stores: list[LeaseStore] = []
        self._memory: dict[str, MemoryStore] = {}

    async def store(self, **options: Any) -> LeaseStore:
        """A new, opened store; stores of one harness and one prefix share their runs."""
        store: LeaseStore
        if self.kind == "memory":
            store = MemoryStore.create(self._name, clock=self.clock, **options)
            self._memory.setdefault(store.options.prefix, store)
        else:
            store = PostgresStore.create(url_with(self.schema), clock=self.clock, **options)
        await store.open()
        self._stores.append(store)
        return store

    def _backdoor(self, prefix: str) -> MemoryStore:
        if prefix not in self._memory:
            self._memory[prefix] = MemoryStore.create(self._name, clock=self.clock, prefix=prefix)
        return self._memory[prefix]

    def raw_run(self, job: str, slot: int, prefix: str = "cron") -> RunRecord | None:
        if self.kind == "memory":
            return self._backdoor(prefix).raw_run(job, slot)
        return testing.raw_run(POSTGRES_URL, self.schema, self.table, prefix, job, slot)

    def force_expire(self, job: str, slot: int, prefix: str = "cron") -> None:
        if self.kind == "memory":
            self._backdoor(prefix).force_expire(job, slot)
        else:
            testing.force_expire(
                POSTGRES_URL, self.schema, self.table, prefix, job, slot, now_ms=self.clock()
            )

    def floor(self, job: str, prefix: str = "cron") -> int | None:
        if self.kind == "memory":
            return self._backdoor(prefix).floor(job)
        return testing.floor(POSTGRES_URL, self.schema, self.table, prefix, job)

    async def close(self) -> None:
        for store in self._stores:
            await store.close()


@pytest.fixture(params=["memory", "postgres"])
async def harness(request: pytest.FixtureRequest) -> AsyncIterator[Harness]:
    if request.param == "postgres":
        require_server()
    h = Harness(request.param, new_schema())
    yield h
    await h.close()
    if request.param == "postgres":
        testing.drop(POSTGRES_URL, h.schema)


@pytest.fixture
async def pg_store(schema: str) -> AsyncIterator[PostgresStore]:
    """A store in a fresh schema, on the server's clock."""
    store = PostgresStore.create(url_with(schema))
    await store.open()
    yield store
    await store.close()


def admin(*statements: sql.Composable | str) -> None:
    """Run `statements` as the test server's superuser (autocommit)."""
    with psycopg.connect(POSTGRES_URL, autocommit=True) as conn:
        for statement in statements:
            conn.execute(statement)  # type: ignore[arg-type]


@pytest.fixture
def role(schema: str) -> Iterator[str]:
    """A throwaway login role with no privileges beyond PUBLIC's (roles are cluster-wide: a
    unique name), dropped after the test with everything granted to it and the `schema` (set up
    first, so torn down after it)."""
    name = "anarchon_role_" + uuid.uuid4().hex[:12]
    admin(sql.SQL("CREATE ROLE {} LOGIN").format(sql.Identifier(name)))
    yield name
    admin(
        sql.SQL("DROP SCHEMA IF EXISTS {} CASCADE").format(sql.Identifier(schema)),
        sql.SQL("DROP OWNED BY {}").format(sql.Identifier(name)),
        sql.SQL("DROP ROLE {}").format(sql.Identifier(name)),
    )


def as_role(role: str, schema: str) -> str:
    """The test server's URL for `role` (trusted: no password), in `schema`."""
    rest = POSTGRES_URL.split("://", 1)[1].split("@", 1)[-1]
    return url_with(schema, f"postgresql://{role}@{rest}")


@pytest.fixture(scope="session")
def pgbouncer() -> Iterator[PgBouncer]:
    """A private PgBouncer in transaction mode in front of the test server, for the session."""
    require_server()
    executable = pgbouncer_binary()
    if executable is None:
        pytest.skip(f"no PgBouncer: {missing_reason()}")
    bouncer = PgBouncer(POSTGRES_URL)
    try:
        bouncer.start(executable)  # installed but not starting is an error, not a skip
        yield bouncer
    finally:
        bouncer.stop()
