"""R1: a store opened read-only (`anarchon.abc.SupportsReadOnly`, as ``anarchon history``,
``status`` and ``dashboard`` open it) creates and changes nothing.

A store no scheduler has used is `StoreNotSetUp` when opened read-only, and still is the second
time, so the first attempt created nothing (a backend whose ``open_read_only`` runs its ``CREATE
... IF NOT EXISTS`` before it looks is caught there). A used store reads, opened read-only, the
same history and jobs as a store opened the ordinary way, sees runs written after it opened,
and reading changes no run (checked through the harness's backdoor).
"""

from __future__ import annotations

from typing import Any

import pytest

from anarchon import (
    ClaimRequest,
    ClaimStore,
    LeaseStore,
    RunStatus,
    StoreNotSetUp,
    SupportsJobList,
    SupportsReadOnly,
    create_store,
)

from .._harness import BackendHarness
from .._rules import rule
from ._base import HarnessSuite, within

__all__ = ["ReadOnlyTests"]

UNUSED_PREFIX = "readonly"
"""The prefix of the store no scheduler has used: nothing in the check opens it otherwise."""
USED_PREFIX = "readused"


def require_read_only(harness: BackendHarness) -> None:
    """Skip (not applicable) unless the harness's stores implement `SupportsReadOnly`. Decided
    from a store built but never opened, so that nothing is set up before the check looks."""
    try:
        store = create_store(harness.url())
    except Exception:  # noqa: BLE001 - a harness whose URL needs more: let the check open it
        return
    if not isinstance(store, SupportsReadOnly):
        pytest.skip("not applicable: the store cannot be opened read-only (SupportsReadOnly)")


class ReadOnlyTests(HarnessSuite):
    """Only for stores that implement `SupportsReadOnly`; not applicable elsewhere."""

    async def open_read_only(self, harness: BackendHarness, **options: Any) -> ClaimStore:
        store = await within(harness.open_store(read_only=True, **options), 30)
        assert isinstance(store, SupportsReadOnly), (
            f"R1: a store opened read-only must implement SupportsReadOnly, got {store!r}"
        )
        return store

    @rule("R1")
    @pytest.mark.asyncio
    async def test_R1_a_store_nobody_set_up_is_not_set_up(self, harness: BackendHarness) -> None:
        require_read_only(harness)
        for attempt in ("first", "second"):
            try:
                store = await self.open_read_only(harness, prefix=UNUSED_PREFIX)
            except StoreNotSetUp as exc:
                assert str(exc), "R1: StoreNotSetUp must say where it looked"
                continue
            jobs = await within(store.jobs()) if isinstance(store, SupportsJobList) else "?"
            created = ": the first read-only open created what the second looks for"
            raise AssertionError(
                f"R1: a store no scheduler has used, opened read-only, must raise StoreNotSetUp "
                f"({attempt} attempt), but it opened (jobs: {jobs})"
                + (created if attempt == "second" else "")
            )
        # The refused opens left nothing half made: the store is set up and used as usual.
        writer = await self.open(harness, prefix=UNUSED_PREFIX)
        slot = await self.current_slot(writer)
        request = self.request("ro-first", slot)
        await self.win(writer, request)
        if harness.capabilities.history:
            runs = await within(writer.history("ro-first"))
            assert [r.token for r in runs] == [request.token], (
                f"R1: after refused read-only opens, the store holds only the run since "
                f"claimed, got {runs}"
            )

    @rule("R1")
    @pytest.mark.asyncio
    async def test_R1_reads_what_schedulers_wrote_and_changes_nothing(
        self, harness: BackendHarness
    ) -> None:
        require_read_only(harness)
        caps = harness.capabilities
        writer = await self.open(harness, prefix=USED_PREFIX)
        slot = await self.current_slot(writer)
        claims = [  # oldest first: stores that only grow (claims_in_slot_order) accept them
            self.request("ro-a", slot),
            self.request("ro-b", slot),
            self.request("ro-a", slot + 1000),
        ]
        for request in claims:
            await self.win(writer, request)
        if caps.leases:
            assert isinstance(writer, LeaseStore)
            await within(writer.finish("ro-a", slot, claims[0].token, RunStatus.SUCCEEDED))
            await within(
                writer.finish("ro-a", slot + 1000, claims[2].token, RunStatus.FAILED, "boom")
            )
            # ro-b stays running, with its lease: reading must not touch it.
        before = await self._raw(harness, claims)

        reader = await self.open_read_only(harness, prefix=USED_PREFIX)
        now = await within(reader.now_ms())
        assert (now is not None) == caps.store_clock, (
            f"R1: now_ms works on a store opened read-only as after open (store_clock is "
            f"{caps.store_clock}), got {now!r}"
        )
        for _ in range(2):  # read twice: the first read must not change what the second sees
            await self._same_reads(writer, reader, ["ro-a", "ro-b"], history=caps.history)
        after = await self._raw(harness, claims)
        assert after == before, (
            f"R1: reading a store opened read-only changed its runs: before {before}, after {after}"
        )
        if caps.leases:
            assert isinstance(writer, LeaseStore)
            assert await within(writer.renew("ro-b", slot, claims[1].token, 60_000)), (
                "R1: the holder of ro-b still renews its lease after the store was read"
            )
        # A monitor stays open (status refreshes, the dashboard serves): it sees new runs.
        later = self.request("ro-c", slot + 2000)
        await self.win(writer, later)
        await self._same_reads(writer, reader, ["ro-a", "ro-b", "ro-c"], history=caps.history)

    @staticmethod
    async def _raw(
        harness: BackendHarness, claims: list[ClaimRequest]
    ) -> dict[tuple[str, int], object]:
        return {
            (c.job, c.slot): await within(harness.raw_run(c.job, c.slot, prefix=USED_PREFIX))
            for c in claims
        }

    @staticmethod
    async def _same_reads(
        writer: ClaimStore, reader: ClaimStore, jobs: list[str], *, history: bool
    ) -> None:
        if history:
            for job in jobs:
                wrote = await within(writer.history(job))
                read = await within(reader.history(job))
                assert read == wrote, (
                    f"R1: opened read-only, the store reads the history of {job!r} as a store "
                    f"opened the ordinary way does: {wrote}, got {read}"
                )
                assert wrote, f"R1: the history of {job!r} shows its runs, got none"
        if isinstance(writer, SupportsJobList):
            assert isinstance(reader, SupportsJobList)
            listed = await within(writer.jobs())
            assert await within(reader.jobs()) == listed, (
                f"R1: opened read-only, the store lists the jobs {listed} as a store opened "
                "the ordinary way does"
            )
