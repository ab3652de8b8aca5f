"""What SQLite adds to the lease rules: a backup's check takes no write lock (L10).

The rules themselves (L1-L11, C2, the ledger) are certified by the conformance kit
(test_conformance.py), on SQLite as on every backend; only what is SQLite's own is tested here.
"""

from __future__ import annotations

import asyncio
import sqlite3
import time
from pathlib import Path

import pytest

from anarchon import ClaimRequest, Outcome, StoreUnavailable

from .conftest import T0, Harness

SLOT = T0
LEASE = 30_000
MAX_LATE = 60_000


def request(
    slot: int = SLOT, *, job: str = "sync", instance: str = "a", **kw: object
) -> ClaimRequest:
    return ClaimRequest(
        job=job,
        slot=slot,
        instance=instance,
        lease_ms=LEASE,
        max_late_ms=MAX_LATE,
        **kw,  # type: ignore[arg-type]
    )


async def test_L10_sqlite_check_of_a_live_run_takes_no_write_lock(tmp_path: Path) -> None:
    # SQLite only: memory:// has no write lock to avoid.
    harness = Harness("sqlite", tmp_path)
    holder = await harness.store()
    backup_store = await harness.store(busy_timeout_ms=200)
    first = request()
    await holder.claim(first)
    blocker = sqlite3.connect(harness.path, isolation_level=None)
    try:
        blocker.execute("BEGIN IMMEDIATE")  # another process holds the write lock
        started = time.monotonic()
        claim = await asyncio.wait_for(backup_store.check(request(instance="b")), timeout=5)
        assert claim.outcome is Outcome.RUNNING
        assert time.monotonic() - started < 0.15  # answered without waiting for the lock
        # The claim step itself needs the lock: it waits busy_timeout_ms, then gives up.
        started = time.monotonic()
        with pytest.raises(StoreUnavailable, match="busy_timeout_ms=200"):
            await backup_store.claim(request(instance="b"))
        assert time.monotonic() - started >= 0.19
    finally:
        blocker.execute("ROLLBACK")
        blocker.close()
    assert (await backup_store.claim(request(instance="b"))).outcome is Outcome.RUNNING
    await harness.close()
