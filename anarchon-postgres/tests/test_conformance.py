"""Certify `postgresql://` with the conformance kit, exactly as a third-party backend would.

The backdoors are those of `anarchon_postgres.testing`: plain SQL against the tables, not the
store's code.
"""

from __future__ import annotations

import os
import uuid
from urllib.parse import urlsplit, urlunsplit

import psycopg
import pytest

from anarchon import Capabilities, RunRecord
from anarchon_conformance import DEFAULT_PREFIX, BackendHarness, ConformanceSuite
from anarchon_postgres import PostgresStore, testing

POSTGRES_URL = os.environ.get(
    "ANARCHON_TEST_POSTGRES_URL", "postgresql://postgres@127.0.0.1:5432/test"
)
TABLE = "anarchon_runs"


def _connect() -> psycopg.Connection[tuple[object, ...]]:
    return psycopg.connect(POSTGRES_URL, autocommit=True, connect_timeout=5)


class PostgresHarness(BackendHarness):
    """A fresh schema per test on the server at ANARCHON_TEST_POSTGRES_URL, dropped afterwards."""

    name = "postgres"

    async def setup(self) -> None:
        self.schema = f"conf_{uuid.uuid4().hex[:16]}"
        try:
            with _connect() as conn:
                conn.execute("SELECT 1")
        except psycopg.OperationalError as exc:
            pytest.skip(f"PostgreSQL at {POSTGRES_URL} does not answer: {exc}")

    async def cleanup(self) -> None:
        await super().cleanup()
        testing.drop(POSTGRES_URL, self.schema)

    def url(self, address: tuple[str, int] | None = None) -> str:
        parts = urlsplit(POSTGRES_URL)
        netloc = parts.netloc
        if address is not None:
            user = netloc.rsplit("@", 1)[0] + "@" if "@" in netloc else ""
            netloc = f"{user}{address[0]}:{address[1]}"
        query = f"{parts.query}&schema={self.schema}" if parts.query else f"schema={self.schema}"
        return urlunsplit((parts.scheme, netloc, parts.path, query, ""))

    def address(self) -> tuple[str, int] | None:
        parts = urlsplit(POSTGRES_URL)
        return (parts.hostname or "127.0.0.1", parts.port or 5432)

    @property
    def capabilities(self) -> Capabilities:
        return PostgresStore.create(self.url()).capabilities

    async def server_version(self) -> str:
        with _connect() as conn:
            row = conn.execute("SHOW server_version").fetchone()
        return f"PostgreSQL {row[0] if row else '?'}"

    async def force_expire(self, job: str, slot: int, *, prefix: str = DEFAULT_PREFIX) -> None:
        testing.force_expire(POSTGRES_URL, self.schema, TABLE, prefix, job, slot)

    async def raw_run(
        self, job: str, slot: int, *, prefix: str = DEFAULT_PREFIX
    ) -> RunRecord | None:
        return testing.raw_run(POSTGRES_URL, self.schema, TABLE, prefix, job, slot)


class TestPostgresConformance(ConformanceSuite):
    harness_class = PostgresHarness
