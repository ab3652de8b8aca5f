"""L12, retries: `retry(job, slot, token, error, delay_ms)` by the holder only appends the failed
try to the run's try log and holds the run until ``now + delay_ms`` by the store's clock; the run
stays running, so no claim wins it before then (L3), and the first claim or check after it takes
it over as attempt + 1 (L4). `finish` keeps the log (its error appended), the log is bounded
(`MAX_TRY_LOG_CHARS`, the oldest text dropped first), and sweeps never delete a waiting run.

Only for lease stores whose `capabilities.retries` is on (`anarchon.abc.SupportsRetry`)."""

from __future__ import annotations

import asyncio
import itertools
import time

import pytest

from anarchon import ClaimStore, LeaseStore, Outcome, RunRecord, RunStatus, SupportsRetry
from anarchon.backend import MAX_TRY_LOG_CHARS, TRY_SEPARATOR, append_try, try_entry

from .._harness import BackendHarness
from .._rules import rule
from ._base import HarnessSuite, require, within
from .pause import wait_past

__all__ = ["RetryTests", "retrier"]

DELAY_MS = 400
"""The wait the checks ask for: long enough to see a claim refused before it, short enough to
keep the kit quick."""
TOLERANCE_MS = 50
"""Slack for the store's processing between the kit's clock readings and the retry's."""
FORGET_WITHIN_S = 5.0


def retrier(harness: BackendHarness, store: ClaimStore) -> SupportsRetry:
    """`store` as a `SupportsRetry`, or skip (not applicable) when `capabilities.retries` (or
    leases) is off."""
    require(harness, "leases", "retries")
    assert isinstance(store, SupportsRetry), (
        f"L12: capabilities.retries is on but {type(store).__name__} does not implement "
        "SupportsRetry (retry)"
    )
    return store


def entry(attempt: int, text: str = "ValueError: the kit's failure") -> str:
    return try_entry(attempt, text)


class RetryTests(HarnessSuite):
    """L12 on lease stores with `capabilities.retries`; not applicable elsewhere."""

    async def open_retrying(self, harness: BackendHarness, **options: object) -> LeaseStore:
        """A lease store of the harness, or skip (not applicable) without `retries`."""
        require(harness, "leases", "retries")
        return await self.open_lease(harness, **options)

    async def raw(self, harness: BackendHarness, job: str, slot: int) -> RunRecord:
        run = await within(harness.raw_run(job, slot))
        assert run is not None, f"L12: the store holds no run of {job!r} at slot {slot}"
        return run

    @rule("L12")
    @pytest.mark.asyncio
    async def test_L12_only_the_holder_retries(self, harness: BackendHarness) -> None:
        store = await self.open_retrying(harness)
        retry = retrier(harness, store).retry
        slot = await self.current_slot(store)
        holder = self.request("l12holder", slot)
        await self.win(store, holder)
        before = await self.raw(harness, "l12holder", slot)
        other = self.request("l12holder", slot, instance="other:1:7219")
        assert not await within(retry("l12holder", slot, other.token, entry(1), DELAY_MS)), (
            "L12: a token that does not hold the run cannot retry it (fenced: False)"
        )
        assert not await within(retry("l12holder", slot + 1000, holder.token, entry(1), 1)), (
            "L12: retry of a slot with no run answers False"
        )
        assert await self.raw(harness, "l12holder", slot) == before, (
            "L12: a refused retry writes nothing"
        )
        assert await within(retry("l12holder", slot, holder.token, entry(1), DELAY_MS)), (
            "L12: the holder's retry answers True"
        )
        assert await within(retry("l12holder", slot, holder.token, entry(1), DELAY_MS)), (
            "L12: a retry resent with the same token while the run still waits answers True"
        )
        run = await self.raw(harness, "l12holder", slot)
        assert run.status is RunStatus.RUNNING and run.token == holder.token, (
            f"L12: a retried run stays running with the holder's token, got {run}"
        )
        assert run.error == entry(1), (
            f"L12: the try log holds the failed try once, got {run.error!r}"
        )
        assert await within(store.finish("l12holder", slot, holder.token, RunStatus.SUCCEEDED))
        assert not await within(retry("l12holder", slot, holder.token, entry(2), 1)), (
            "L12: a finished run cannot be retried"
        )

    @rule("L12", "T1")
    @pytest.mark.asyncio
    async def test_L12_the_wait_is_kept_by_the_store_clock(self, harness: BackendHarness) -> None:
        """No claim wins the run during the wait (L3); the first after it takes it over as
        attempt 2 (L4); the failed holder is fenced."""
        store = await self.open_retrying(harness)
        other = await self.open_retrying(harness)
        slot = await self.current_slot(store)
        holder = self.request("l12wait", slot)
        await self.win(store, holder)
        before = await self.now(store)
        assert await within(
            retrier(harness, store).retry("l12wait", slot, holder.token, entry(1), DELAY_MS)
        )
        after = await self.now(store)
        run = await self.raw(harness, "l12wait", slot)
        assert run.lease_until is not None and (
            before + DELAY_MS - TOLERANCE_MS <= run.lease_until <= after + DELAY_MS + TOLERANCE_MS
        ), (
            f"L12: the run waits until the store's now + {DELAY_MS} ms "
            f"({before + DELAY_MS}..{after + DELAY_MS}), got lease_until {run.lease_until}"
        )
        early = await within(other.claim(self.request("l12wait", slot, instance="b:1:7219")))
        assert early.outcome is Outcome.RUNNING, (
            f"L12/L3: a claim during the retry's wait does not win the run, got {early}"
        )
        await wait_past(store, run.lease_until)
        backup = self.request("l12wait", slot, instance="b:1:7219")
        taken = await within(other.check(backup))
        assert taken.won and taken.attempt == 2, (
            f"L12/L4: the first check after the wait takes the run over as attempt 2, got {taken}"
        )
        assert not await within(store.finish("l12wait", slot, holder.token, RunStatus.SUCCEEDED)), (
            "L12: the failed holder is fenced once another attempt took the run over"
        )

    @rule("L12", "L8")
    @pytest.mark.asyncio
    async def test_L12_the_try_log_keeps_every_try(self, harness: BackendHarness) -> None:
        """Two failed tries, then a success: the record says succeeded, attempt 3, and its
        error is the log of both failures, oldest first."""
        store = await self.open_retrying(harness)
        retry = retrier(harness, store).retry
        slot = await self.current_slot(store)
        tries = [self.request("l12log", slot, instance=f"i{n}:1:7219") for n in (1, 2, 3)]
        await self.win(store, tries[0])
        for n, (failed, nxt) in enumerate(itertools.pairwise(tries), start=1):
            assert await within(retry("l12log", slot, failed.token, entry(n, f"E{n}"), 1))
            run = await self.raw(harness, "l12log", slot)
            assert run.lease_until is not None
            await wait_past(store, run.lease_until)
            taken = await within(store.claim(nxt))
            assert taken.won and taken.attempt == n + 1, (
                f"L12/L4: after the wait, attempt {n + 1} takes the run over, got {taken}"
            )
        log = append_try(entry(1, "E1"), entry(2, "E2"))
        run = await self.raw(harness, "l12log", slot)
        assert run.error == log and run.status is RunStatus.RUNNING, (
            f"L12: a takeover keeps the try log {log!r}, got {run}"
        )
        assert await within(store.finish("l12log", slot, tries[2].token, RunStatus.SUCCEEDED))
        done = await self.raw(harness, "l12log", slot)
        assert (done.status, done.attempt, done.error) == (RunStatus.SUCCEEDED, 3, log), (
            f"L12: a run that succeeds after failed tries keeps their log, got {done}"
        )
        if harness.capabilities.history:
            shown = {r.slot: r for r in await within(store.history("l12log", 5))}[slot]
            assert shown.error == log, f"L12: history shows the try log, got {shown}"

    @rule("L12", "L8")
    @pytest.mark.asyncio
    async def test_L12_a_failed_finish_appends_to_the_log(self, harness: BackendHarness) -> None:
        store = await self.open_retrying(harness)
        slot = await self.current_slot(store)
        first, second = (self.request("l12fail", slot, instance=f"i{n}:1:7219") for n in (1, 2))
        await self.win(store, first)
        assert await within(
            retrier(harness, store).retry("l12fail", slot, first.token, entry(1, "E1"), 1)
        )
        run = await self.raw(harness, "l12fail", slot)
        assert run.lease_until is not None
        await wait_past(store, run.lease_until)
        assert (await within(store.claim(second))).won
        last = entry(2, "E2")
        assert await within(store.finish("l12fail", slot, second.token, RunStatus.FAILED, last))
        done = await self.raw(harness, "l12fail", slot)
        log = append_try(entry(1, "E1"), last)
        assert (done.status, done.attempt, done.error) == (RunStatus.FAILED, 2, log), (
            f"L12: finish appends its error to the try log ({log!r}), got {done}"
        )

    @rule("L12", "L5")
    @pytest.mark.asyncio
    async def test_L12_no_attempts_left_interrupts(self, harness: BackendHarness) -> None:
        """After the wait, a claimer whose `attempts` leave no room does not take the run over."""
        store = await self.open_retrying(harness)
        slot = await self.current_slot(store)
        holder = self.request("l12last", slot, attempts=1)
        await self.win(store, holder)
        assert await within(
            retrier(harness, store).retry("l12last", slot, holder.token, entry(1), 1)
        )
        run = await self.raw(harness, "l12last", slot)
        assert run.lease_until is not None
        await wait_past(store, run.lease_until)
        answer = await within(store.claim(self.request("l12last", slot, attempts=1)))
        assert answer.outcome is Outcome.DONE, (
            f"L12/L5: with attempts=1 there is no attempt 2 after the wait, got {answer}"
        )
        run = await self.raw(harness, "l12last", slot)
        kept = entry(1) + TRY_SEPARATOR
        assert run.status is RunStatus.INTERRUPTED and (run.error or "").startswith(kept), (
            f"L12/L5: the run is interrupted and keeps its try log, L5's entry appended after "
            f"{kept!r}; got {run}"
        )

    @rule("L12")
    @pytest.mark.asyncio
    async def test_L12_the_try_log_is_bounded(self, harness: BackendHarness) -> None:
        store = await self.open_retrying(harness)
        retry = retrier(harness, store).retry
        slot = await self.current_slot(store)
        holder = self.request("l12long", slot)
        await self.win(store, holder)
        log: str | None = None
        for n in range(1, 5):
            text = entry(n, f"E{n} " + chr(ord("a") + n) * 1500)
            assert await within(retry("l12long", slot, holder.token, text, DELAY_MS))
            log = append_try(log, text)
        run = await self.raw(harness, "l12long", slot)
        assert log is not None and len(log) == MAX_TRY_LOG_CHARS
        assert run.error == log, (
            f"L12: the try log keeps its last {MAX_TRY_LOG_CHARS} characters, the oldest dropped "
            f"first: expected {len(log)} characters ending {log[-40:]!r}, got "
            f"{len(run.error or '')} ending {(run.error or '')[-40:]!r}"
        )

    @rule("L12", "L11")
    @pytest.mark.asyncio
    async def test_L12_sweeps_keep_a_waiting_run(self, harness: BackendHarness) -> None:
        """A run waiting for its retry is past its retention, beyond `history_limit`: the sweep
        that deletes an older finished run keeps it."""
        require(harness, "leases", "retries")
        if harness.capabilities.remembers_ms is not None:
            pytest.skip(
                "not applicable: capability remembers_ms is finite (the store keeps no "
                "floor and sweeps nothing)"
            )
        store = await self.open_retrying(harness, history_limit=1, retention_margin_ms=1)
        now = await self.now(store)
        old = self.request("l12sweep", now - 60, lease_ms=100, max_late_ms=200, attempts=1)
        waiting = self.request("l12sweep", now - 50, lease_ms=100, max_late_ms=200, attempts=2)
        await self.win(store, old)
        assert await within(store.finish("l12sweep", old.slot, old.token, RunStatus.SUCCEEDED))
        await self.win(store, waiting)
        assert await within(
            retrier(harness, store).retry("l12sweep", waiting.slot, waiting.token, entry(1), 60_000)
        )
        deadline = time.monotonic() + FORGET_WITHIN_S
        last = waiting.slot
        while await within(harness.raw_run("l12sweep", old.slot)) is not None:
            if time.monotonic() > deadline:
                pytest.skip(
                    f"not applicable: the store kept a run past its retention for "
                    f"{FORGET_WITHIN_S} s with history_limit=1, so sweeps could not be seen"
                )
            last = max(last + 1, await self.now(store) - 10)
            await self.win(store, self.request("l12sweep", last, lease_ms=100, attempts=1))
            await asyncio.sleep(0.05)
        kept = await within(harness.raw_run("l12sweep", waiting.slot))
        assert kept is not None and kept.status is RunStatus.RUNNING, (
            f"L12/L11: a sweep deleted the older run but must keep the one waiting for its "
            f"retry (slot {waiting.slot}), got {kept}"
        )
        assert kept.error == entry(1), kept
