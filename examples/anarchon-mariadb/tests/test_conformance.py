"""Certify `mariadb://` with the anarchon conformance kit.

The server is ANARCHON_TEST_MARIADB_URL (default: root without a password on 127.0.0.1:3306,
database `test`). The tables are shared; every test claims under prefixes of its own
(`ServerHarness.mine`), deleted afterwards.
"""

from __future__ import annotations

from typing import Any

import aiomysql
import pymysql

from anarchon.backend import Capabilities, RunRecord, RunStatus, StoreURL
from anarchon_conformance import DEFAULT_PREFIX, ConformanceSuite, ServerHarness
from anarchon_mariadb import MariaDBOptions, MariaDBStore

TABLE = "conformance"
COLUMNS = "slot, status, attempt, token, holder, claimed_at, lease_until, finished_at, error"


class MariaDBHarness(ServerHarness):
    """Backdoors in plain SQL on a connection of our own, straight to the server."""

    name = "mariadb"
    plugins = ("anarchon_mariadb._plugin",)  # not installed: register the scheme ourselves
    url_env = "ANARCHON_TEST_MARIADB_URL"
    default_url = "mariadb://root@127.0.0.1:3306/test"
    default_port = 3306

    def store_options(self) -> dict[str, str]:
        return {"table": TABLE}  # the backend's own option, in the URL

    @property
    def capabilities(self) -> Capabilities:
        return MariaDBStore(StoreURL.parse(self.url()), MariaDBOptions()).capabilities

    async def ping(self) -> None:
        server = StoreURL.parse(self.server_url())
        self.conn = await aiomysql.connect(
            host=server.host or "127.0.0.1",
            port=server.port or 3306,
            user=server.username or "root",
            password=server.password or "",
            db=server.path or "test",
            autocommit=True,
        )

    async def drop_prefix(self, prefix: str) -> None:
        await self.sql("SET SESSION sql_notes = 0")
        for table in ("runs", "jobs"):
            try:
                await self.sql(f"DELETE FROM {TABLE}_{table} WHERE prefix = %s", prefix)
            except pymysql.err.ProgrammingError:
                pass  # no store ever created the tables

    async def close_backdoor(self) -> None:
        self.conn.close()

    async def sql(self, query: str, *params: Any) -> list[tuple[Any, ...]]:
        async with self.conn.cursor() as cur:
            await cur.execute(query, params)
            return list(await cur.fetchall())

    async def server_version(self) -> str:
        return f"MariaDB {(await self.sql('SELECT VERSION()'))[0][0]}"

    async def force_expire(self, job: str, slot: int, *, prefix: str = DEFAULT_PREFIX) -> None:
        await self.sql(
            f"UPDATE {TABLE}_runs SET lease_until = "
            "CAST(UNIX_TIMESTAMP(NOW(3)) * 1000 AS SIGNED) - 1 "
            "WHERE prefix = %s AND job = %s AND slot = %s",
            *(self.mine(prefix), job, slot),
        )

    async def raw_run(
        self, job: str, slot: int, *, prefix: str = DEFAULT_PREFIX
    ) -> RunRecord | None:
        rows = await self.sql(
            f"SELECT {COLUMNS} FROM {TABLE}_runs WHERE prefix = %s AND job = %s AND slot = %s",
            *(self.mine(prefix), job, slot),
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
