"""Stores for the rule tests: `memory://` (the reference model) and `sqlite:///` side by side.

Both run on one manual clock, so lateness and retention are tested without sleeping, and both
expose the same backdoors (`raw_run`, `force_expire`, `floor`) that bypass the code under test.
"""

from __future__ import annotations

import uuid
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest

from anarchon import LeaseStore, MemoryStore, RunRecord
from anarchon_sqlite import SQLiteStore, testing
from anarchon_test_support import (
    T0,  # noqa: F401 - the rule tests import it from here
    ManualClock,
)
from anarchon_test_support.markers import PROCESSES, SLOW, mark_tests


class Harness:
    """Makes stores of one kind that share their runs, and reads them behind their back."""

    def __init__(self, kind: str, tmp_path: Path) -> None:
        self.kind = kind
        self.clock = ManualClock()
        self.path = tmp_path / "anarchon.db"
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
            store = SQLiteStore.create(self.path, clock=self.clock, **options)
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
        return testing.raw_run(self.path, prefix, job, slot)

    def force_expire(self, job: str, slot: int, prefix: str = "cron") -> None:
        if self.kind == "memory":
            self._backdoor(prefix).force_expire(job, slot)
        else:
            testing.force_expire(self.path, prefix, job, slot, now_ms=self.clock())

    def floor(self, job: str, prefix: str = "cron") -> int | None:
        if self.kind == "memory":
            return self._backdoor(prefix).floor(job)
        return testing.floor(self.path, prefix, job)

    async def close(self) -> None:
        for store in self._stores:
            await store.close()


@pytest.fixture(params=["memory", "sqlite"])
async def harness(request: pytest.FixtureRequest, tmp_path: Path) -> AsyncIterator[Harness]:
    h = Harness(request.param, tmp_path)
    yield h
    await h.close()


@pytest.fixture
async def sqlite_store(tmp_path: Path) -> AsyncIterator[SQLiteStore]:
    """A store on a new file, on the wall clock."""
    store = SQLiteStore.create(tmp_path / "anarchon.db")
    await store.open()
    yield store
    await store.close()


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    # The kit's checks are defined in the kit, so they cannot carry our markers themselves.
    here = Path(__file__).parent / "test_conformance.py"
    mark_tests(items, here, PROCESSES, {"test_C1_single_winner_processes"})
    mark_tests(items, here, SLOW, {"test_C5_early_claims_never_win_twice"})
