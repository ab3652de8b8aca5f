"""Setting jobs up at start (`SupportsJobSetup`): a conflict refuses the start, a store error
does not (the claims set the jobs up), and stores without it are not asked."""

from __future__ import annotations

import logging
from collections.abc import Sequence

import pytest

from anarchon import ConfigError, MemoryStore, Scheduler, StoreUnavailable, SupportsJobSetup


class SettingUp(MemoryStore):
    """`memory://` that records the jobs it is asked to set up, or fails as told."""

    def __init__(self, fail: Exception | None = None) -> None:
        base = MemoryStore.create("setup")
        super().__init__(base.url, base.options)
        self.fail = fail
        self.asked: list[list[str]] = []
        self.closed = 0

    async def setup_jobs(self, jobs: Sequence[str]) -> None:
        self.asked.append(list(jobs))
        if self.fail is not None:
            raise self.fail

    async def close(self) -> None:
        self.closed += 1
        await super().close()


def scheduler(store: SettingUp) -> Scheduler:
    s = Scheduler(store, instance="test:1:aaaa", environ={})
    for name in ("b", "a"):
        s.add_job(lambda: None, "0 0 1 1 *", name=name)
    return s


async def test_the_jobs_are_set_up_once_at_start_in_order() -> None:
    store = SettingUp()
    assert isinstance(store, SupportsJobSetup)
    s = scheduler(store)
    await s.start()
    try:
        assert store.asked == [["a", "b"]]
    finally:
        await s.stop()


async def test_a_conflict_refuses_the_start() -> None:
    store = SettingUp(ConfigError("job a: the store holds other settings"))
    s = scheduler(store)
    with pytest.raises(ConfigError, match="job a: the store holds other settings"):
        await s.start()
    assert s.health().started is False


async def test_a_conflict_closes_a_store_the_scheduler_opened(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    store = SettingUp(ConfigError("conflict"))
    monkeypatch.setattr("anarchon._runtime.scheduler.create_store", lambda *_, **__: store)
    s = Scheduler("memory://setup", instance="test:1:aaaa", environ={})
    s.add_job(lambda: None, "0 0 1 1 *", name="a")
    with pytest.raises(ConfigError):
        await s.start()
    assert store.closed == 1


async def test_a_store_error_is_logged_and_the_scheduler_starts(
    caplog: pytest.LogCaptureFixture,
) -> None:
    store = SettingUp(StoreUnavailable("store down for a moment"))
    s = scheduler(store)
    with caplog.at_level(logging.WARNING, logger="anarchon.scheduler"):
        await s.start()
    try:
        assert s.health().started
        assert any(
            "could not set up the jobs at start (store down for a moment)" in r.getMessage()
            for r in caplog.records
        )
    finally:
        await s.stop()


async def test_stores_without_it_are_not_asked() -> None:
    store = MemoryStore.create("setup")
    assert not isinstance(store, SupportsJobSetup)
    s = Scheduler(store, instance="test:1:aaaa", environ={})
    s.add_job(lambda: None, "0 0 1 1 *", name="a")
    await s.start()
    await s.stop()
