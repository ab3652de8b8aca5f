"""Certify PostgreSQL in a container, as an author with no PostgreSQL of their own would.

`anarchon_conformance.containers` starts one PostgreSQL container for the test process through
testcontainers: the official ``postgres:16`` image, or the one ``ANARCHON_TEST_POSTGRES_IMAGE``
names (``scripts/dev test`` builds ``anarchon/postgres:bookworm`` from Debian's packages with
``scripts/container-images``, as no registry is reachable here). The kit then runs against it,
whatever server ``ANARCHON_TEST_POSTGRES_URL`` names, with a harness that needs nothing but the
container's URL and the backdoors of `anarchon_postgres.testing`. Skipped, with the reason, where
no Docker engine answers.
"""

from __future__ import annotations

import uuid
from urllib.parse import urlsplit

import psycopg

from anarchon import Capabilities, RunRecord
from anarchon_conformance import DEFAULT_PREFIX, BackendHarness, ConformanceSuite
from anarchon_conformance.containers import POSTGRES, container_url
from anarchon_postgres import PostgresStore, testing

TABLE = "anarchon_runs"


class InContainer(BackendHarness):
    """A fresh schema per test in this test process's PostgreSQL container, dropped afterwards."""

    name = "postgres"

    async def setup(self) -> None:
        self.server = container_url(POSTGRES)
        self.schema = f"conf_{uuid.uuid4().hex[:16]}"

    async def cleanup(self) -> None:
        await super().cleanup()
        testing.drop(self.server, self.schema)

    def url(self, address: tuple[str, int] | None = None) -> str:
        parts = urlsplit(self.server)
        netloc = parts.netloc
        if address is not None:
            netloc = f"{netloc.rpartition('@')[0]}@{address[0]}:{address[1]}"
        return f"{parts.scheme}://{netloc}{parts.path}?schema={self.schema}"

    def address(self) -> tuple[str, int] | None:
        parts = urlsplit(self.server)
        return parts.hostname or "127.0.0.1", parts.port or 5432

    @property
    def capabilities(self) -> Capabilities:
        return PostgresStore.create(self.url()).capabilities

    async def server_version(self) -> str:
        with psycopg.connect(self.server, autocommit=True) as conn:
            row = conn.execute("SHOW server_version").fetchone()
        version = row[0] if row else "?"
        return f"PostgreSQL {version} in a container of {POSTGRES.image_name()}"

    async def force_expire(self, job: str, slot: int, *, prefix: str = DEFAULT_PREFIX) -> None:
        testing.force_expire(self.server, self.schema, TABLE, prefix, job, slot)

    async def raw_run(
        self, job: str, slot: int, *, prefix: str = DEFAULT_PREFIX
    ) -> RunRecord | None:
        return testing.raw_run(self.server, self.schema, TABLE, prefix, job, slot)


class TestPostgresInContainer(ConformanceSuite):
    harness_class = InContainer
