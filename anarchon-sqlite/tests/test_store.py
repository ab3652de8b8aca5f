"""The rest of the SQLite store's surface: connect, claim_many, history, prefixes, lifecycle."""

from __future__ import annotations

from pathlib import Path

import anarchon
from anarchon import (
    Capabilities,
    ClaimRequest,
    Outcome,
    Overlap,
    RunStatus,
    SupportsClaimMany,
)
from anarchon_sqlite import SQLiteStore, testing

from .conftest import T0, ManualClock


def request(job: str, slot: int = T0, *, instance: str = "a", **kw: object) -> ClaimRequest:
    return ClaimRequest(job=job, slot=slot, instance=instance, **kw)  # type: ignore[arg-type]


async def test_connect_by_url_and_capabilities(tmp_path: Path) -> None:
    async with anarchon.connect(f"sqlite:///{tmp_path}/a.db?prefix=app") as store:
        assert isinstance(store, SQLiteStore)
        assert isinstance(store, SupportsClaimMany)
        assert store.options.prefix == "app"
        assert store.capabilities == Capabilities(
            leases=True,
            self_recognition=True,
            fencing=True,
            overlap=True,
            history=True,
            store_clock=True,
            skips=True,
            batch=True,
            pause=True,
            trigger=True,
            retries=True,
            membership=True,
            remembers_ms=None,
        )
        now = await store.now_ms()
        assert now is not None and abs(now - await anarchon.MemoryStore.create().now_ms()) < 5_000
        assert (await store.claim(request("j", now))).won
    assert testing.raw_run(tmp_path / "a.db", "app", "j", now) is not None


async def test_claim_many_decides_each_in_one_transaction(tmp_path: Path) -> None:
    clock = ManualClock()
    store = SQLiteStore.create(tmp_path / "a.db", clock=clock)
    await store.open()
    held = request("held")
    assert (await store.claim(held)).won
    clock.advance(100)
    late = ClaimRequest(job="late", slot=T0, instance="a", max_late_ms=50)
    coalesced = request("c", skip_reason="coalesced: a newer slot ran")
    batch = [request("a"), request("b"), request("held", instance="z"), late, request("a")]
    batch += [coalesced, request("c", instance="y")]
    claims = await store.claim_many(batch)
    assert [c.outcome for c in claims] == [
        Outcome.WON,
        Outcome.WON,
        Outcome.RUNNING,
        Outcome.SKIPPED,  # S1: recorded in the batch's transaction
        Outcome.RUNNING,  # a second request for "a" with another token: the first took it
        Outcome.SKIPPED,
        Outcome.SKIPPED,  # the record written earlier in the same batch answers
    ]
    assert claims[0].token == batch[0].token and claims[4].token == batch[0].token
    assert [c.lease_until for c in claims[:2]] == [T0 + 100 + 60_000] * 2  # one instant
    assert claims[3].reason == "late: slot is 100 ms old, max_late is 50 ms"
    assert claims[5] == claims[6] and claims[6].token == coalesced.token
    for job in ("late", "c"):
        row = testing.raw_run(tmp_path / "a.db", "cron", job, T0)
        assert row is not None and (row.status, row.attempt) == (RunStatus.SKIPPED, 0)
        assert row.finished_at == T0 + 100
    assert await store.claim_many([]) == []
    await store.close()


async def test_history_is_newest_first_and_limited(tmp_path: Path) -> None:
    clock = ManualClock()
    store = SQLiteStore.create(tmp_path / "a.db", clock=clock)
    await store.open()
    slots = [T0 + 5_000, T0, T0 + 10_000, T0 + 1_000]
    for slot in slots:
        clock.now = slot
        req = request("h", slot, overlap=Overlap.ALLOW)
        await store.claim(req)
        await store.finish("h", slot, req.token, RunStatus.SUCCEEDED)
    history = await store.history("h")
    assert [r.slot for r in history] == sorted(slots, reverse=True)
    assert all(r.status is RunStatus.SUCCEEDED and r.job == "h" for r in history)
    assert [r.slot for r in await store.history("h", limit=2)] == [T0 + 10_000, T0 + 5_000]
    assert await store.history("h", limit=0) == []
    assert await store.history("nothing") == []
    assert history[0] == testing.raw_run(tmp_path / "a.db", "cron", "h", T0 + 10_000)
    await store.close()


async def test_prefixes_in_one_file_never_meet(tmp_path: Path) -> None:
    clock = ManualClock()
    path = tmp_path / "a.db"
    blue = SQLiteStore.create(path, clock=clock, prefix="blue")
    green = SQLiteStore.create(path, clock=clock, prefix="green")
    await blue.open()
    await green.open()
    b, g = request("sync"), request("sync")
    assert (await blue.claim(b)).won
    assert (await green.claim(g)).won  # same job and slot, other deployment
    assert (await blue.check(request("sync"))).token == b.token
    assert not await green.renew("sync", T0, b.token, 1_000)
    assert not await green.finish("sync", T0, b.token, RunStatus.SUCCEEDED)
    assert not await green.release("sync", T0, b.token)
    assert [r.token for r in await blue.history("sync")] == [b.token]
    assert [r.token for r in await green.history("sync")] == [g.token]
    # Overlap is per prefix too: blue's live run does not block green's next slot.
    assert (await green.claim(request("other", T0))).won
    assert (await blue.claim(request("other", T0 + 1))).won
    await blue.close()
    await green.close()


async def test_reopen_keeps_runs_and_close_is_idempotent(tmp_path: Path) -> None:
    clock = ManualClock()
    store = SQLiteStore.create(tmp_path / "a.db", clock=clock)
    await store.open()
    await store.open()  # a second open is a no-op
    req = request("j")
    await store.claim(req)
    await store.close()
    await store.close()
    again = SQLiteStore.create(tmp_path / "a.db", clock=clock)
    await again.open()
    assert (await again.claim(req)).won  # C2 across a restart
    await again.close()


async def test_repr_and_str_show_the_file(tmp_path: Path) -> None:
    store = SQLiteStore.create(tmp_path / "a.db", prefix="p1")
    assert repr(store) == f"SQLiteStore({str(tmp_path / 'a.db')!r}, prefix='p1')"
