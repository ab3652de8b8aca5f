"""X1, trigger: `trigger` writes a run asked for now, at an ad-hoc slot that is the store's time
of the call, never on a whole second (scheduled slots always are) and distinct from every other
trigger of the job; `triggers` lists it to every instance, oldest first; its slot is claimed,
leased, taken over and recorded like any slot, so exactly one instance wins it (C1, C4).

Only for stores whose `capabilities.trigger` is on (`anarchon.abc.SupportsTrigger`)."""

from __future__ import annotations

import asyncio

import pytest

from anarchon import ClaimStore, LeaseStore, RunStatus, SupportsTrigger, Trigger
from anarchon.backend import is_triggered_slot

from .._harness import BackendHarness
from .._rules import rule
from ._base import HarnessSuite, claim_as_scheduled, require, within
from .pause import wait_past
from .read_only import require_read_only

__all__ = ["TriggerTests", "triggerer"]

REASON = "by hand (conformance kit)"


def triggerer(harness: BackendHarness, store: ClaimStore) -> SupportsTrigger:
    """`store` as a `SupportsTrigger`, or skip (not applicable) when `capabilities.trigger` is
    off."""
    require(harness, "trigger")
    assert isinstance(store, SupportsTrigger), (
        f"X1: capabilities.trigger is on but {type(store).__name__} does not implement "
        "SupportsTrigger (trigger, triggers)"
    )
    return store


def assert_ad_hoc(trigger: Trigger) -> None:
    assert is_triggered_slot(trigger.slot), (
        f"X1: a triggered slot is never on a whole second (a scheduled slot is), got {trigger}"
    )


class TriggerTests(HarnessSuite):
    """X1 on stores with `capabilities.trigger`; not applicable elsewhere."""

    @rule("X1")
    @pytest.mark.asyncio
    async def test_X1_a_trigger_names_an_ad_hoc_slot(self, harness: BackendHarness) -> None:
        store = await self.open(harness)
        before = await self.now(store)
        trigger = await within(triggerer(harness, store).trigger("x1", reason=REASON, by="kit"))
        after = await self.now(store)
        assert (trigger.job, trigger.reason, trigger.by) == ("x1", REASON, "kit"), (
            f"X1: trigger() returns the trigger it wrote (job, reason, by), got {trigger}"
        )
        assert before - 5 <= trigger.requested_at <= after + 5, (
            f"X1: a trigger is written at the store's now ({before}..{after}), got {trigger}"
        )
        assert_ad_hoc(trigger)
        assert trigger.requested_at <= trigger.slot < trigger.requested_at + 1000, (
            f"X1: the ad-hoc slot is the store's time of the call (moved off the whole second "
            f"and past the job's other triggers by a few ms), got {trigger}"
        )

    @rule("X1")
    @pytest.mark.asyncio
    async def test_X1_triggers_of_a_job_get_distinct_slots(self, harness: BackendHarness) -> None:
        """One after another and racing from several instances: every slot differs."""
        stores = [await self.open(harness) for _ in range(4)]
        one = triggerer(harness, stores[0])
        made = [await within(one.trigger("x1many")) for _ in range(4)]
        made += await within(
            asyncio.gather(
                *(triggerer(harness, stores[n % len(stores)]).trigger("x1many") for n in range(12))
            ),
            60,
        )
        for trigger in made:
            assert_ad_hoc(trigger)
        slots = [t.slot for t in made]
        assert len(set(slots)) == len(slots), (
            f"X1: {len(made)} triggers of one job have distinct slots, got {sorted(slots)}"
        )
        listed = await within(one.triggers(0))
        assert sorted(t.slot for t in listed) == sorted(slots), (
            f"X1: triggers() lists each of the {len(made)} triggers once, got {listed}"
        )

    @rule("X1")
    @pytest.mark.asyncio
    async def test_X1_triggers_are_listed_oldest_first_since(self, harness: BackendHarness) -> None:
        store = await self.open(harness)
        other = await self.open(harness)
        first = await within(triggerer(harness, store).trigger("x1list-a"))
        await wait_past(store, first.requested_at)
        second = await within(triggerer(harness, other).trigger("x1list-b", reason=REASON))
        await wait_past(store, second.requested_at)
        third = await within(triggerer(harness, store).trigger("x1list-a", by="ops@host"))
        for asking in (store, other):
            listed = await within(triggerer(harness, asking).triggers(first.requested_at))
            assert listed == [first, second, third], (
                f"X1: triggers(since) lists every trigger written at or after since, oldest "
                f"first, as trigger() returned it, to every instance: expected "
                f"{[first, second, third]}, got {listed}"
            )
        later = await within(triggerer(harness, other).triggers(second.requested_at))
        assert later == [second, third], (
            f"X1: triggers({second.requested_at}) leaves out those written before it: expected "
            f"{[second, third]}, got {later}"
        )
        after = await self.now(store)
        none = await within(triggerer(harness, store).triggers(after + 1))
        assert none == [], f"X1: no trigger was written after {after}, got {none}"
        elsewhere = await self.open(harness, prefix="x1-elsewhere")
        assert await within(triggerer(harness, elsewhere).triggers(0)) == [], (
            "X1: another prefix lists none of this prefix's triggers"
        )

    @rule("X1", "C1")
    @pytest.mark.asyncio
    async def test_X1_a_triggered_slot_is_won_once(self, harness: BackendHarness) -> None:
        """Many instances race for the triggered slot: exactly one wins it; it is leased, taken
        over and recorded like a scheduled run, and history shows it at its ad-hoc slot."""
        stores = [await self.open(harness) for _ in range(4)]
        trigger = await within(triggerer(harness, stores[0]).trigger("x1run", reason=REASON))
        assert_ad_hoc(trigger)
        scheduled = await self.current_slot(stores[0])
        requests = [
            self.request("x1run", trigger.slot, instance=f"host:{n}:7219") for n in range(16)
        ]
        claims = await within(
            asyncio.gather(
                *(claim_as_scheduled(stores[n % len(stores)], r) for n, r in enumerate(requests))
            ),
            60,
        )
        won = [(r, c) for r, c in zip(requests, claims, strict=True) if c.won]
        assert len(won) == 1, (
            f"X1/C1: {len(requests)} instances claimed triggered slot {trigger.slot}: exactly one "
            f"must win it, {len(won)} did ({[str(c.outcome) for c in claims]})"
        )
        winner, claim = won[0]
        assert claim.attempt == 1, f"X1: the first run of a triggered slot is attempt 1: {claim}"
        # The scheduled slot of the job is another slot: the trigger did not take it.
        await self.win(stores[1], self.request("x1run", scheduled))
        caps = harness.capabilities
        if caps.leases:
            run = await within(harness.raw_run("x1run", trigger.slot))
            assert run is not None and run.token == winner.token, (
                f"X1: the store holds the winner's run at the triggered slot, got {run}"
            )
            # Taken over like any run (L4), and fenced: the first holder cannot finish it.
            await within(harness.force_expire("x1run", trigger.slot))
            backup = self.request("x1run", trigger.slot, instance="backup:1:7219")
            taken = await within(stores[2].claim(backup))
            assert taken.won and taken.attempt == 2, (
                f"X1: the run of a triggered slot is taken over after its lease ran out (L4), "
                f"got {taken}"
            )
            first, second = stores[0], stores[2]
            assert isinstance(first, LeaseStore) and isinstance(second, LeaseStore)
            assert not await within(
                first.finish("x1run", trigger.slot, winner.token, RunStatus.SUCCEEDED)
            ), "X1: the fenced first holder of a triggered run cannot finish it (L8)"
            assert await within(
                second.finish("x1run", trigger.slot, backup.token, RunStatus.SUCCEEDED)
            ), "X1: the holder of a triggered run finishes it"
        if caps.history:
            runs = {r.slot: r for r in await within(stores[3].history("x1run", 10))}
            shown = runs.get(trigger.slot)
            assert shown is not None and is_triggered_slot(shown.slot), (
                f"X1: history shows the run of the triggered slot {trigger.slot}, got {shown}"
            )
            if caps.leases:
                assert shown.status is RunStatus.SUCCEEDED and shown.attempt == 2, shown
            assert not is_triggered_slot(scheduled) and scheduled in runs, (
                f"X1: history shows the scheduled run at {scheduled} beside it: {sorted(runs)}"
            )

    @rule("X1")
    @pytest.mark.asyncio
    async def test_X1_triggers_read_on_a_read_only_store(self, harness: BackendHarness) -> None:
        require(harness, "trigger")
        require_read_only(harness)
        writer = await self.open(harness, prefix="x1read")
        triggerer(harness, writer)
        await self.win(writer, self.request("x1ro", await self.current_slot(writer)))
        reader = await within(harness.open_store(prefix="x1read", read_only=True), 30)
        assert await within(triggerer(harness, reader).triggers(0)) == [], (
            "X1: opened read-only, a store with no trigger lists none"
        )
        trigger = await within(triggerer(harness, writer).trigger("x1ro", reason=REASON))
        listed = await within(triggerer(harness, reader).triggers(0))
        assert listed == [trigger], (
            f"X1: opened read-only, the store lists the triggers: {[trigger]}, got {listed}"
        )
