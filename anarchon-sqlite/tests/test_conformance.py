"""Certify `sqlite:///` with the conformance kit, exactly as a third-party backend would."""

from __future__ import annotations

import shutil
import sqlite3
import tempfile
from pathlib import Path

from anarchon import Capabilities, RunRecord
from anarchon_conformance import DEFAULT_PREFIX, BackendHarness, ConformanceSuite
from anarchon_sqlite import SQLiteStore, testing


class SQLiteHarness(BackendHarness):
    """A fresh database file per test, in its own temporary directory."""

    name = "sqlite"
    host_clock = True  # every process sharing the file reads this host's clock (T1)

    async def setup(self) -> None:
        self.directory = Path(tempfile.mkdtemp(prefix="anarchon-conformance-"))
        self.path = self.directory / "anarchon.db"

    async def cleanup(self) -> None:
        await super().cleanup()
        shutil.rmtree(self.directory, ignore_errors=True)

    def url(self, address: tuple[str, int] | None = None) -> str:
        return f"sqlite:///{self.path}"  # an absolute path: sqlite:////tmp/.../anarchon.db

    @property
    def capabilities(self) -> Capabilities:
        return SQLiteStore.create(self.path).capabilities

    async def server_version(self) -> str:
        return f"SQLite {sqlite3.sqlite_version}"

    async def force_expire(self, job: str, slot: int, *, prefix: str = DEFAULT_PREFIX) -> None:
        testing.force_expire(self.path, prefix, job, slot)

    async def raw_run(
        self, job: str, slot: int, *, prefix: str = DEFAULT_PREFIX
    ) -> RunRecord | None:
        return testing.raw_run(self.path, prefix, job, slot)


class TestSQLiteConformance(ConformanceSuite):
    harness_class = SQLiteHarness
