"""P1, pause: while a job is paused, a claim of a slot with no run yet records it ``skipped``
with the reason ``paused`` (``paused: <reason>``) in the claim's own atomic step, whatever the
request says, so no instance can start a paused job; runs made before the pause go on, and after
`resume` (or the pause's `until_ms`, by the store's clock) new slots are won again.

Only for stores whose `capabilities.pause` is on (`anarchon.abc.SupportsPause`)."""

from __future__ import annotations

import asyncio
import collections
import time

import pytest

from anarchon import (
    ClaimRequest,
    ClaimStore,
    Outcome,
    Overlap,
    Pause,
    RunStatus,
    SupportsClaimMany,
    SupportsPause,
    SupportsTrigger,
)
from anarchon.backend import PAUSED

from .._harness import BackendHarness
from .._rules import rule
from ._base import HarnessSuite, claim_as_scheduled, memory_max_late_ms, require, within
from .ledger import assert_skip_record
from .read_only import require_read_only

__all__ = ["PauseTests", "paused_reason", "pauser", "wait_past"]

REASON = "deploy freeze (conformance kit)"
SHORT_PAUSE_MS = 1_500
"""How long the check of a pause that ends by itself pauses for: long enough that the claim
made right after it is surely inside it, even on a loaded machine."""


def pauser(harness: BackendHarness, store: ClaimStore) -> SupportsPause:
    """`store` as a `SupportsPause`, or skip (not applicable) when `capabilities.pause` is off."""
    require(harness, "pause")
    assert isinstance(store, SupportsPause), (
        f"P1: capabilities.pause is on but {type(store).__name__} does not implement "
        "SupportsPause (pause, resume, pauses)"
    )
    assert harness.capabilities.skips, (
        "P1: a store that pauses records each paused slot as a skip: Capabilities(skips=True)"
    )
    return store


def paused_reason(reason: str = "") -> str:
    """The reason P1 records for a slot of a job paused with `reason`."""
    return f"{PAUSED}: {reason}" if reason else PAUSED


async def wait_past(store: ClaimStore, instant_ms: int, *, seconds: float = 10.0) -> None:
    """Wait until the store's clock is past `instant_ms` (a bounded poll, never a blind sleep)."""
    deadline = time.monotonic() + seconds
    while await HarnessSuite.now(store) <= instant_ms:
        assert time.monotonic() < deadline, (
            f"the store's clock did not pass {instant_ms} within {seconds} s"
        )
        await asyncio.sleep(0.02)


class PauseTests(HarnessSuite):
    """P1 on stores with `capabilities.pause`; not applicable elsewhere."""

    async def assert_paused(self, store: ClaimStore, request: ClaimRequest, reason: str) -> None:
        """A claim of `request`'s slot (no run yet or a recorded pause skip) answers the skip."""
        answer = await within(store.claim(request))
        assert answer.outcome is Outcome.SKIPPED and answer.reason == reason, (
            f"P1: a claim of slot {request.slot} of paused job {request.job!r} answers skipped "
            f"with the reason {reason!r}, got {answer}"
        )
        assert answer.attempt == 0, f"P1: a paused slot is a skip record (attempt 0): {answer}"

    @rule("P1")
    @pytest.mark.asyncio
    async def test_P1_a_paused_jobs_slot_is_recorded_skipped(self, harness: BackendHarness) -> None:
        store = await self.open(harness)
        other = await self.open(harness)
        caps = harness.capabilities
        before = await self.now(store)
        pause = await within(pauser(harness, store).pause("p1", by="kit@conformance"))
        after = await self.now(store)
        assert (pause.job, pause.until_ms, pause.reason, pause.by) == (
            "p1",
            None,
            "",
            "kit@conformance",
        ), f"P1: pause() returns the pause it wrote, got {pause}"
        assert before - 5 <= pause.since_ms <= after + 5, (
            f"P1: a pause starts at the store's now ({before}..{after}), got {pause.since_ms}"
        )
        slot = await self.current_slot(store)
        request = self.request("p1", slot, instance="host:1:9a05")
        before = await self.now(store)
        await self.assert_paused(store, request, PAUSED)
        after = await self.now(store)
        if caps.leases:
            record = await within(harness.raw_run("p1", slot))
            assert_skip_record(record, request, PAUSED, before, after)
        # Later claims, checks and the resend answer the one skip record (S1).
        for asking in (
            self.request("p1", slot, instance="host:2:9a05"),
            self.request("p1", slot, overlap=Overlap.SKIP, max_late_ms=memory_max_late_ms(caps)),
            request,
        ):
            answer = await within(other.claim(asking))
            assert answer.outcome is Outcome.SKIPPED and answer.reason == PAUSED, (
                f"P1/S1: a later claim of a slot recorded paused answers that skip, got {answer}"
            )
            assert answer.token in (None, request.token), answer
        if caps.history:
            runs = {r.slot: r for r in await within(other.history("p1", 10))}
            shown = runs.get(slot)
            assert shown is not None and shown.status is RunStatus.SKIPPED, (
                f"P1: history shows the paused slot {slot} as skipped, got {shown}"
            )
            assert shown.error == PAUSED, f"P1: history shows the reason {PAUSED!r}: {shown}"
        # The pause's own reason follows the word, and a skip_reason in the request gives way.
        await within(pauser(harness, other).pause("p1r", reason=REASON))
        coalesce = "coalesced: a newer slot is due (conformance kit)"
        for request in (
            self.request("p1r", slot),
            self.request("p1r", slot - 1000, skip_reason=coalesce),
        ):
            await self.assert_paused(store, request, paused_reason(REASON))
        # After resume, a new slot is won; the slots decided while paused stay decided.
        assert await within(pauser(harness, store).resume("p1")), (
            "P1: resume() of a paused job answers True"
        )
        assert not await within(pauser(harness, store).resume("p1")), (
            "P1: resume() of a job that is no longer paused answers False"
        )
        await self.assert_paused(other, self.request("p1", slot), PAUSED)
        await self.win(other, self.request("p1", slot - 1000))

    @rule("P1")
    @pytest.mark.asyncio
    async def test_P1_racing_claims_of_a_paused_job_never_win(
        self, harness: BackendHarness
    ) -> None:
        """Many instances claim a paused job's slots at once: none wins, and each slot holds one
        skip record that every claim of it answers."""
        stores = [await self.open(harness) for _ in range(4)]
        await within(pauser(harness, stores[0]).pause("p1race", reason=REASON))
        base = await self.current_slot(stores[0])
        slots = [base - i * 1000 for i in range(3)]
        requests = [
            self.request("p1race", slot, instance=f"host:{n}:9ace")
            for slot in slots
            for n in range(16)
        ]
        claims = await within(
            asyncio.gather(
                *(claim_as_scheduled(stores[n % len(stores)], r) for n, r in enumerate(requests))
            ),
            60,
        )
        tokens: dict[int, set[str | None]] = collections.defaultdict(set)
        for request, claim in zip(requests, claims, strict=True):
            assert claim.outcome is Outcome.SKIPPED and claim.reason == paused_reason(REASON), (
                f"P1: {len(requests)} racing claims of paused job p1race: each answers skipped "
                f"with {paused_reason(REASON)!r}, slot {request.slot} got {claim}"
            )
            tokens[request.slot].add(claim.token)
        for slot in slots:
            assert len(tokens[slot]) == 1, (
                f"P1/S1: the racing claims of slot {slot} answered {len(tokens[slot])} different "
                f"skip records, the store keeps one: {tokens[slot]}"
            )
            if harness.capabilities.leases:
                run = await within(harness.raw_run("p1race", slot))
                assert run is not None and run.status is RunStatus.SKIPPED, (
                    f"P1: the store holds one skip record for slot {slot}, got {run}"
                )
                answered = next(iter(tokens[slot]))
                assert answered in (None, run.token), (
                    f"P1: the racing claims answered the skip of token {answered}, the store "
                    f"holds {run}"
                )

    @rule("P1")
    @pytest.mark.asyncio
    async def test_P1_claim_many_keeps_the_pause(self, harness: BackendHarness) -> None:
        store = await self.open(harness)
        paused = pauser(harness, store)
        if not (harness.capabilities.batch and isinstance(store, SupportsClaimMany)):
            pytest.skip("not applicable: the store claims one job at a time (SupportsClaimMany)")
        await within(paused.pause("p1many-a"))
        slot = await self.current_slot(store)
        answers = await within(
            store.claim_many([self.request("p1many-a", slot), self.request("p1many-b", slot)])
        )
        assert answers[0].outcome is Outcome.SKIPPED and answers[0].reason == PAUSED, (
            f"P1: claim_many keeps the pause: paused job p1many-a answers skipped "
            f"{PAUSED!r}, got {answers[0]}"
        )
        assert answers[1].won, (
            f"P1: in the same batch, job p1many-b (not paused) is won, got {answers[1]}"
        )

    @rule("P1")
    @pytest.mark.asyncio
    async def test_P1_a_pause_ends_at_its_until(self, harness: BackendHarness) -> None:
        store = await self.open(harness)
        paused = pauser(harness, store)
        now = await self.now(store)
        ended = await within(paused.pause("p1until", until_ms=now - 1000, reason=REASON))
        assert ended.until_ms == now - 1000, f"P1: pause() keeps its until_ms: {ended}"
        slot = await self.current_slot(store)
        await self.win(store, self.request("p1until", slot))  # the pause was over already
        assert [p.job for p in await within(paused.pauses())] == [], (
            "P1: pauses() lists only the pauses in force, not one whose until_ms is past"
        )
        now = await self.now(store)
        until = now + SHORT_PAUSE_MS
        await within(paused.pause("p1until", until_ms=until))
        await self.assert_paused(store, self.request("p1until", slot - 1000), PAUSED)
        assert await self.now(store) < until, (
            f"P1: the check took longer than its {SHORT_PAUSE_MS} ms pause (a stalled store?)"
        )
        await wait_past(store, until)
        assert [p.job for p in await within(paused.pauses())] == [], (
            f"P1: a pause until {until} is no longer listed once the store's clock passed it"
        )
        await self.win(store, self.request("p1until", slot - 2000))

    @rule("P1")
    @pytest.mark.asyncio
    async def test_P1_runs_made_before_the_pause_go_on(self, harness: BackendHarness) -> None:
        """Renew, finish, a resend of the holder's claim and a takeover (L4) are unaffected."""
        require(harness, "pause", "leases")
        store = await self.open_lease(harness)
        other = await self.open_lease(harness)
        slot = await self.current_slot(store)
        holder = self.request("p1run", slot - 1000)
        await self.win(store, holder)
        crashed = self.request("p1run", slot)
        await self.win(store, crashed)
        await within(pauser(harness, store).pause("p1run", reason=REASON))
        assert await within(store.renew("p1run", holder.slot, holder.token, 60_000)), (
            "P1: the holder of a run made before the pause still renews its lease"
        )
        again = await within(store.claim(holder))
        assert again.won and again.attempt == 1, (
            f"P1: the holder's resent claim of its running run is still won (L2), got {again}"
        )
        seen = await within(other.check(self.request("p1run", holder.slot)))
        assert seen.outcome is Outcome.RUNNING, (
            f"P1: a running run stays running for the others while paused, got {seen}"
        )
        assert await within(
            store.finish("p1run", holder.slot, holder.token, RunStatus.SUCCEEDED)
        ), "P1: the holder of a run made before the pause still finishes it"
        run = await within(harness.raw_run("p1run", holder.slot))
        assert run is not None and run.status is RunStatus.SUCCEEDED, (
            f"P1: the run finished while paused is recorded succeeded, got {run}"
        )
        await within(harness.force_expire("p1run", crashed.slot))
        taken = await within(other.claim(self.request("p1run", crashed.slot, instance="b:2:0")))
        assert taken.won and taken.attempt == 2, (
            f"P1: a run made before the pause is taken over (L4) after its lease ran out, even "
            f"while the job is paused, got {taken}"
        )

    @rule("P1")
    @pytest.mark.asyncio
    async def test_P1_pauses_lists_and_pausing_again_replaces(
        self, harness: BackendHarness
    ) -> None:
        store = await self.open(harness)
        other = await self.open(harness)
        paused = pauser(harness, store)
        now = await self.now(store)
        first = await within(paused.pause("p1b", until_ms=now + 3_600_000, reason="first"))
        a = await within(paused.pause("p1a", reason=REASON, by="ops@host"))
        listed = await within(pauser(harness, other).pauses())
        assert listed == [a, first], (
            f"P1: pauses() lists the pauses in force, sorted by job, as pause() returned them "
            f"(job, since_ms, until_ms, reason, by), to every instance: expected {[a, first]}, "
            f"got {listed}"
        )
        replaced = await within(pauser(harness, other).pause("p1b", reason="second"))
        listed = await within(paused.pauses())
        assert listed == [a, replaced], (
            f"P1: pausing a paused job replaces its pause: expected {[a, replaced]}, got {listed}"
        )
        slot = await self.current_slot(store)
        await self.assert_paused(store, self.request("p1b", slot), paused_reason("second"))
        # A pause holds for its job of its prefix only.
        await self.win(store, self.request("p1c", slot))
        elsewhere = await self.open(harness, prefix="p1-elsewhere")
        await self.win(elsewhere, self.request("p1a", slot))
        assert await within(pauser(harness, elsewhere).pauses()) == [], (
            "P1: another prefix lists none of this prefix's pauses"
        )
        assert not await within(pauser(harness, elsewhere).resume("p1a")), (
            "P1: resume() in another prefix finds no pause of the job"
        )
        assert await within(paused.resume("p1a"))
        assert await within(paused.pauses()) == [replaced], (
            "P1: after resume() the job is no longer listed"
        )
        assert not await within(paused.resume("p1-never")), (
            "P1: resume() of a job never paused answers False"
        )

    @rule("P1")
    @pytest.mark.asyncio
    async def test_P1_a_triggered_slot_of_a_paused_job_is_skipped(
        self, harness: BackendHarness
    ) -> None:
        require(harness, "pause", "trigger")
        store = await self.open(harness)
        await within(pauser(harness, store).pause("p1trig", reason=REASON))
        assert isinstance(store, SupportsTrigger), (
            f"X1: capabilities.trigger is on but {type(store).__name__} does not implement "
            "SupportsTrigger"
        )
        trigger = await within(store.trigger("p1trig"))
        await self.assert_paused(store, self.request("p1trig", trigger.slot), paused_reason(REASON))

    @rule("P1")
    @pytest.mark.asyncio
    async def test_P1_pauses_read_on_a_read_only_store(self, harness: BackendHarness) -> None:
        require(harness, "pause")
        require_read_only(harness)
        writer = await self.open(harness, prefix="p1read")
        pauser(harness, writer)
        await self.win(writer, self.request("p1ro", await self.current_slot(writer)))
        reader = await within(harness.open_store(prefix="p1read", read_only=True), 30)
        assert await within(pauser(harness, reader).pauses()) == [], (
            "P1: opened read-only, a store with no pause lists none"
        )
        pause = await within(pauser(harness, writer).pause("p1ro", reason=REASON))
        listed: list[Pause] = await within(pauser(harness, reader).pauses())
        assert listed == [pause], (
            f"P1: opened read-only, the store lists the pauses in force: {[pause]}, got {listed}"
        )
