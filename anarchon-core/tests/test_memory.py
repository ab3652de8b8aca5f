"""memory:// basics; the rules L1-L11 are tested for every Python-side store in anarchon-sqlite's
test_rules.py and certified by the conformance kit."""

from __future__ import annotations

import anarchon
from anarchon import ClaimRequest, MemoryStore, Outcome


async def test_connect_is_awaitable_and_a_context_manager() -> None:
    store = await anarchon.connect("memory://")
    assert isinstance(store, MemoryStore)
    async with anarchon.connect("memory://") as other:
        assert await other.now_ms() is not None


async def test_stores_of_one_name_share_runs_and_others_do_not() -> None:
    a = MemoryStore.create("shared-a")
    b = MemoryStore.create("shared-a")
    c = MemoryStore.create("elsewhere")
    slot = await a.now_ms()
    assert (await a.claim(ClaimRequest(job="j", slot=slot, instance="a"))).won
    assert (
        await b.claim(ClaimRequest(job="j", slot=slot, instance="b"))
    ).outcome is Outcome.RUNNING
    assert (await c.claim(ClaimRequest(job="j", slot=slot, instance="c"))).won


async def test_unnamed_stores_are_private() -> None:
    a, b = MemoryStore.create(), MemoryStore.create()
    slot = await a.now_ms()
    assert (await a.claim(ClaimRequest(job="j", slot=slot, instance="a"))).won
    assert (await b.claim(ClaimRequest(job="j", slot=slot, instance="b"))).won


async def test_prefixes_isolate_within_one_name() -> None:
    a = MemoryStore.create("pfx", prefix="one")
    b = MemoryStore.create("pfx", prefix="two")
    slot = await a.now_ms()
    assert (await a.claim(ClaimRequest(job="j", slot=slot, instance="a"))).won
    assert (await b.claim(ClaimRequest(job="j", slot=slot, instance="b"))).won


def test_capabilities_are_complete() -> None:
    caps = MemoryStore.create().capabilities
    assert caps.leases and caps.fencing and caps.self_recognition and caps.batch
    assert caps.remembers_ms is None
    assert isinstance(MemoryStore.create(), anarchon.SupportsClaimMany)
