"""Certify `mariadb://` with the anarchon conformance kit.

The server is ANARCHON_TEST_MARIADB_URL (default: root without a password on 127.0.0.1:3306,
database `test`). Every test gets its own pair of tables, dropped afterwards.
"""

from __future__ import annotations

import os
from typing import Any

import aiomysql
import pymysql
import pytest

from anarchon import Capabilities, RunRecord, RunStatus, StoreURL
from anarchon_conformance import DEFAULT_PREFIX, BackendHarness, ConformanceSuite
from anarchon_mariadb import MariaDBOptions, MariaDBStore

DEFAULT_URL = "mariadb://root@127.0.0.1:3306/test"
COLUMNS = "slot, status, attempt, token, holder, claimed_at, lease_until, finished_at, error"


class MariaDBHarness(BackendHarness):
    """Fresh tables ``t<run id>_runs`` / ``_jobs`` per test; backdoors in plain SQL."""

    name = "mariadb"
    plugins = ("anarchon_mariadb._plugin",)  # not installed: register the scheme ourselves

    def __init__(self, url: str | None = None) -> None:
        super().__init__(url or os.environ.get("ANARCHON_TEST_MARIADB_URL", DEFAULT_URL))
        server = StoreURL.parse(self.given_url or DEFAULT_URL)
        self.host, self.port = server.host or "127.0.0.1", server.port or 3306
        self.user, self.password = server.username or "root", server.password or ""
        self.database = server.path or "test"
        self.table = f"t{self.run_id}"

    def url(self, address: tuple[str, int] | None = None) -> str:
        host, port = address or (self.host, self.port)
        auth = f"{self.user}:{self.password}" if self.password else self.user
        return f"mariadb://{auth}@{host}:{port}/{self.database}?table={self.table}"

    def address(self) -> tuple[str, int]:
        return (self.host, self.port)

    @property
    def capabilities(self) -> Capabilities:
        return MariaDBStore(StoreURL.parse(self.url()), MariaDBOptions()).capabilities

    # -- lifecycle and backdoors: a connection of our own, straight to the server ---------------
    async def setup(self) -> None:
        try:
            self.conn = await aiomysql.connect(
                host=self.host,
                port=self.port,
                user=self.user,
                password=self.password,
                db=self.database,
                autocommit=True,
            )
        except (OSError, pymysql.err.OperationalError) as exc:
            pytest.skip(f"no MariaDB server at {self.host}:{self.port}: {exc}")

    async def cleanup(self) -> None:
        await super().cleanup()
        await self.sql("SET SESSION sql_notes = 0")  # the tables may never have been created
        await self.sql(f"DROP TABLE IF EXISTS {self.table}_runs, {self.table}_jobs")
        self.conn.close()

    async def sql(self, query: str, *params: Any) -> list[tuple[Any, ...]]:
        async with self.conn.cursor() as cur:
            await cur.execute(query, params)
            return list(await cur.fetchall())

    async def server_version(self) -> str:
        return f"MariaDB {(await self.sql('SELECT VERSION()'))[0][0]}"

    async def force_expire(self, job: str, slot: int, *, prefix: str = DEFAULT_PREFIX) -> None:
        await self.sql(
            f"UPDATE {self.table}_runs SET lease_until = "
            "CAST(UNIX_TIMESTAMP(NOW(3)) * 1000 AS SIGNED) - 1 "
            "WHERE prefix = %s AND job = %s AND slot = %s",
            prefix,
            job,
            slot,
        )

    async def raw_run(
        self, job: str, slot: int, *, prefix: str = DEFAULT_PREFIX
    ) -> RunRecord | None:
        rows = await self.sql(
            f"SELECT {COLUMNS} FROM {self.table}_runs WHERE prefix = %s AND job = %s AND slot = %s",
            prefix,
            job,
            slot,
        )
        if not rows:
            return None
        slot, status, attempt, token, holder, claimed_at, lease_until, finished_at, error = rows[0]
        return RunRecord(
            job=job,
            slot=slot,
            status=RunStatus(status),
            attempt=attempt,
            token=token,
            holder=holder,
            claimed_at=claimed_at,
            lease_until=lease_until,
            finished_at=finished_at,
            error=error,
        )


class TestMariaDBConformance(ConformanceSuite):
    harness_class = MariaDBHarness
