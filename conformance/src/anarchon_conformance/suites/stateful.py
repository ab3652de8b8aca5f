"""MODEL: a Hypothesis state machine drives several virtual instances against the backend and
the `memory://` reference model with the same steps, and checks they agree after every one."""

from __future__ import annotations

import asyncio
import itertools
import time
from typing import Any

import pytest

from anarchon import (
    Claim,
    ClaimRequest,
    LeaseStore,
    MemoryStore,
    Overlap,
    RunRecord,
    RunStatus,
    new_token,
)

from .._harness import BackendHarness
from .._rules import rule
from ..profiles import stateful_settings
from ._base import HarnessSuite, capability_doc

__all__ = ["StatefulTests"]

JOBS = ("ja", "jb")
INSTANCES = 3
LATE_AGE_MS = 3_600_000
"""Slots this old are late in both stores; the others are far from every time boundary, so the
two clocks never disagree on an outcome."""

SKIP_REASON = "coalesced: a newer slot is due too (model step)"

_prefixes = itertools.count()


def _claim_view(claim: Claim) -> tuple[Any, ...]:
    # A skip's kind, not its text: the text names the slot holding a lease (any one of several)
    # and a late slot's age, which the two stores see a few milliseconds apart.
    return (claim.outcome, claim.attempt, claim.skip_kind)


def _run_view(run: RunRecord | None) -> tuple[Any, ...] | None:
    if run is None:
        return None
    kind = (run.error or "").split(":", 1)[0] if run.status is RunStatus.SKIPPED else None
    return (run.status, run.attempt, run.token, run.holder, kind)


def _wall_ms() -> int:
    return time.time_ns() // 1_000_000


def build_machine(harness: BackendHarness, loop: asyncio.AbstractEventLoop) -> type[Any]:
    """The state machine class for one harness, stepping its stores on `loop`."""
    from hypothesis import strategies as st
    from hypothesis.stateful import Bundle, RuleBasedStateMachine
    from hypothesis.stateful import rule as step

    def run(awaitable: Any) -> Any:
        return loop.run_until_complete(asyncio.wait_for(awaitable, 30))

    class ModelAgreement(RuleBasedStateMachine):
        requests = Bundle("requests")

        def __init__(self) -> None:
            super().__init__()
            self.prefix = f"m{next(_prefixes)}x{harness.run_id[:8]}"
            self.stores: list[LeaseStore] = []
            for _ in range(INSTANCES):
                store = run(harness.open_store(prefix=self.prefix))
                assert isinstance(store, LeaseStore)
                self.stores.append(store)
            # The model runs on the store's clock; a store without one (now_ms() is None) judges
            # by the instance's clock (T1), which here is this process's wall clock.
            store_now = run(self.stores[0].now_ms())
            now = _wall_ms() if store_now is None else store_now
            offset = now - _wall_ms()
            self.model = MemoryStore.create(clock=lambda: _wall_ms() + offset)
            base = now - now % 1000
            self.slots = [base - i * 1000 for i in range(4)] + [base - LATE_AGE_MS]

        def teardown(self) -> None:
            for store in self.stores:
                run(store.close())

        # -- the oracle ---------------------------------------------------------------------
        def agree(self, what: str, ours: Any, theirs: Any) -> None:
            assert ours == theirs, (
                f"MODEL: {what}: the backend answered {ours!r}, memory:// answered {theirs!r}"
            )

        def agree_run(self, job: str, slot: int) -> None:
            ours = run(harness.raw_run(job, slot, prefix=self.prefix))
            self.agree(
                f"run ({job}, {slot})", _run_view(ours), _run_view(self.model.raw_run(job, slot))
            )

        def agree_claim(self, what: str, ours: Claim, theirs: Claim) -> None:
            self.agree(what, _claim_view(ours), _claim_view(theirs))
            if ours.token is not None:
                self.agree(f"{what} token", ours.token, theirs.token)

        def make(
            self,
            instance: int,
            job: str,
            slot: int,
            overlap: Overlap,
            skip_reason: str | None = None,
        ) -> ClaimRequest:
            return ClaimRequest(
                job=job,
                slot=self.slots[slot],
                token=new_token(),
                instance=f"vi:{instance}:0000",
                lease_ms=600_000,
                max_late_ms=600_000,
                overlap=overlap,
                attempts=2,
                skip_reason=skip_reason,
            )

        # -- steps --------------------------------------------------------------------------
        @step(
            target=requests,
            instance=st.integers(0, INSTANCES - 1),
            job=st.sampled_from(JOBS),
            slot=st.integers(0, 4),
            overlap=st.sampled_from(Overlap),
        )
        def claim(self, instance: int, job: str, slot: int, overlap: Overlap) -> Any:
            request = self.make(instance, job, slot, overlap)
            self.agree_claim(
                f"claim {request}",
                run(self.stores[instance].claim(request)),
                run(self.model.claim(request)),
            )
            self.agree_run(job, request.slot)
            return (instance, request)

        @step(
            target=requests,
            instance=st.integers(0, INSTANCES - 1),
            job=st.sampled_from(JOBS),
            slot=st.integers(0, 4),
        )
        def skip(self, instance: int, job: str, slot: int) -> Any:
            """A claim with a skip_reason (catch-up 'latest' coalescing an older slot)."""
            request = self.make(instance, job, slot, Overlap.ALLOW, SKIP_REASON)
            self.agree_claim(
                f"skip {request}",
                run(self.stores[instance].claim(request)),
                run(self.model.claim(request)),
            )
            self.agree_run(job, request.slot)
            return (instance, request)

        @step(job=st.sampled_from(JOBS))
        def history(self, job: str) -> None:
            if not harness.capabilities.history:
                return
            self.agree(
                f"history of {job}",
                [(r.slot, _run_view(r)) for r in run(self.stores[0].history(job, 10))],
                [(r.slot, _run_view(r)) for r in run(self.model.history(job, 10))],
            )

        @step(sent=requests, instance=st.integers(0, INSTANCES - 1))
        def resend(self, sent: tuple[int, ClaimRequest], instance: int) -> None:
            _, request = sent
            self.agree_claim(
                f"resend {request}",
                run(self.stores[instance].claim(request)),
                run(self.model.claim(request)),
            )
            self.agree_run(request.job, request.slot)

        @step(
            instance=st.integers(0, INSTANCES - 1),
            job=st.sampled_from(JOBS),
            slot=st.integers(0, 4),
            overlap=st.sampled_from(Overlap),
        )
        def check(self, instance: int, job: str, slot: int, overlap: Overlap) -> None:
            request = self.make(instance, job, slot, overlap)
            self.agree_claim(
                f"check {request}",
                run(self.stores[instance].check(request)),
                run(self.model.check(request)),
            )
            self.agree_run(job, request.slot)

        @step(sent=requests)
        def renew(self, sent: tuple[int, ClaimRequest]) -> None:
            instance, r = sent
            self.agree(
                f"renew {r}",
                run(self.stores[instance].renew(r.job, r.slot, r.token, 600_000)),
                run(self.model.renew(r.job, r.slot, r.token, 600_000)),
            )
            self.agree_run(r.job, r.slot)

        @step(sent=requests, status=st.sampled_from([RunStatus.SUCCEEDED, RunStatus.FAILED]))
        def finish(self, sent: tuple[int, ClaimRequest], status: RunStatus) -> None:
            instance, r = sent
            self.agree(
                f"finish {r} {status}",
                run(self.stores[instance].finish(r.job, r.slot, r.token, status, "e")),
                run(self.model.finish(r.job, r.slot, r.token, status, "e")),
            )
            self.agree_run(r.job, r.slot)

        @step(sent=requests)
        def release(self, sent: tuple[int, ClaimRequest]) -> None:
            instance, r = sent
            self.agree(
                f"release {r}",
                run(self.stores[instance].release(r.job, r.slot, r.token)),
                run(self.model.release(r.job, r.slot, r.token)),
            )
            self.agree_run(r.job, r.slot)

        @step(job=st.sampled_from(JOBS), slot=st.integers(0, 3))
        def force_expire(self, job: str, slot: int) -> None:
            held = self.model.raw_run(job, self.slots[slot])
            if held is None or held.status is not RunStatus.RUNNING:
                return
            run(harness.force_expire(job, self.slots[slot], prefix=self.prefix))
            self.model.force_expire(job, self.slots[slot])
            self.agree_run(job, self.slots[slot])

    return ModelAgreement


class StatefulTests(HarnessSuite):
    """MODEL, on lease stores: the reference model defines every answer."""

    @rule("MODEL")
    def test_MODEL_agrees_with_the_memory_reference(self, request: pytest.FixtureRequest) -> None:
        from hypothesis.stateful import run_state_machine_as_test

        cls = getattr(self, "harness_class", None)
        if cls is None:
            raise TypeError(f"{type(self).__name__} needs `harness_class = YourHarness`")
        harness = cls(request.config.getoption("anarchon_url", default=None))
        loop = asyncio.new_event_loop()
        try:
            loop.run_until_complete(asyncio.wait_for(harness.setup(), 60))
            try:
                if not harness.capabilities.leases:
                    pytest.skip(
                        f"not applicable: capability leases is off ({capability_doc('leases')})"
                    )
                loop.run_until_complete(self._record_backend(request, harness))
                machine = build_machine(harness, loop)
                run_state_machine_as_test(machine, settings=stateful_settings(request.config))
            finally:
                loop.run_until_complete(asyncio.wait_for(harness.cleanup(), 60))
        finally:
            loop.run_until_complete(loop.shutdown_asyncgens())
            loop.close()
