"""What every suite mixin shares: the harness fixture, request builders and capability skips."""

from __future__ import annotations

import ast
import asyncio
import functools
import inspect
import itertools
import time
from collections.abc import AsyncIterator, Awaitable
from typing import Any, ClassVar, TypeVar

import pytest
import pytest_asyncio

from anarchon import (
    Capabilities,
    Claim,
    ClaimRequest,
    ClaimStore,
    LeaseStore,
    Outcome,
    Overlap,
    new_token,
)

from .._harness import DEFAULT_PREFIX, BackendHarness
from .._resend import RESENDS, claim_as_scheduled
from .._rules import MARKER

__all__ = [
    "NOT_WON",
    "RESENDS",
    "HarnessSuite",
    "capability_doc",
    "claim_as_scheduled",
    "default_max_late_ms",
    "memory_max_late_ms",
    "optional",
    "require",
    "within",
]

T = TypeVar("T")

TIMEOUT_S = 15.0
"""Longest a single store call may take before the kit calls it a hang."""


@functools.cache
def _capability_docs() -> dict[str, str]:
    tree = ast.parse(inspect.getsource(Capabilities))
    body = tree.body[0].body  # type: ignore[attr-defined]
    docs: dict[str, str] = {}
    for stmt, nxt in itertools.pairwise(body):
        if (
            isinstance(stmt, ast.AnnAssign)
            and isinstance(stmt.target, ast.Name)
            and isinstance(nxt, ast.Expr)
            and isinstance(nxt.value, ast.Constant)
            and isinstance(nxt.value.value, str)
        ):
            docs[stmt.target.id] = " ".join(nxt.value.value.split())
    return docs


def capability_doc(flag: str) -> str:
    """The docstring of a `Capabilities` flag: the reason a test that needs it is skipped."""
    return _capability_docs().get(flag, flag)


def require(harness: BackendHarness, *flags: str) -> None:
    """Skip (not applicable) unless every capability flag is on."""
    caps = harness.capabilities
    for flag in flags:
        if not getattr(caps, flag):
            pytest.skip(f"not applicable: capability {flag} is off ({capability_doc(flag)})")


NOT_WON = (Outcome.LOST, Outcome.UNKNOWN, Outcome.RUNNING, Outcome.DONE)
"""What a claim of a run another token holds may answer."""

MAX_LATE_MS = 60_000
"""The kit's usual ``max_late`` for its claims, on stores that remember long enough."""
AHEAD_MS = 5_000
"""How far ahead of the clock the kit's checks claim slots (the next few seconds)."""


def default_max_late_ms(caps: Capabilities) -> int:
    """The kit's usual ``max_late``, cut to the store's memory: a store that remembers a claim
    for a window counted from when it is written refuses (C5) a claim it could not remember until
    ``slot + max_late``, so the kit leaves `AHEAD_MS` of the memory for the slots it claims
    ahead; the scheduler never asks for more (T3 refuses such a job at start)."""
    if caps.remembers_ms is None:
        return MAX_LATE_MS
    memory = caps.remembers_ms
    return min(MAX_LATE_MS, max(memory - AHEAD_MS, memory // 2))


def memory_max_late_ms(caps: Capabilities) -> int:
    """A ``max_late`` so long that a slot within the store's memory is never late: the checks
    that a run is remembered (T3) ask with it, so that only the store's memory can refuse them.
    The store's whole memory when it is finite (longer would be a claim a C5 store refuses)."""
    return 3_600_000 if caps.remembers_ms is None else caps.remembers_ms


def optional(store: ClaimStore, protocol: type[T], what: str) -> T:
    """`store` as an optional `protocol` it implements, or skip (not applicable: `what`)."""
    if not isinstance(store, protocol):
        pytest.skip(f"not applicable: {what} ({protocol.__name__})")
    return store


async def within(awaitable: Awaitable[T], seconds: float = TIMEOUT_S) -> T:
    """Await with a bound, so a hanging store fails the check instead of stalling the run."""
    return await asyncio.wait_for(awaitable, seconds)


class HarnessSuite:
    """Base of the suite mixins: one harness object per test, from ``harness_class``."""

    harness_class: ClassVar[type[BackendHarness]]
    """Set by the author: ``class TestMyConformance(ConformanceSuite): harness_class = MyHarness``."""

    instance = "conformance:1:aaaa"

    max_late_ms = MAX_LATE_MS
    """The ``max_late`` of `request` unless given: `default_max_late_ms` of the harness."""

    @pytest_asyncio.fixture
    async def harness(self, request: pytest.FixtureRequest) -> AsyncIterator[BackendHarness]:
        cls = getattr(self, "harness_class", None)
        if cls is None:
            raise TypeError(
                f"{type(self).__name__} needs a harness: set `harness_class = YourHarness`"
            )
        marker = request.node.get_closest_marker(MARKER)
        self.checking = "/".join(marker.args) if marker is not None else "?"
        harness = cls(request.config.getoption("anarchon_url", default=None))
        await within(harness.setup(), 60)
        try:
            self.max_late_ms = default_max_late_ms(harness.capabilities)
            await self._record_backend(request, harness)
            yield harness
        finally:
            await within(harness.cleanup(), 60)

    @staticmethod
    async def _record_backend(request: pytest.FixtureRequest, harness: BackendHarness) -> None:
        from .. import pytest_plugin

        collector = pytest_plugin.collector(request.config)
        if collector is not None:
            suite = request.node.parent
            if suite is not None and not collector.has_backend(suite.nodeid):
                collector.set_backend(
                    suite.nodeid, harness.backend_name, await within(harness.server_version())
                )

    checking = "?"
    """The rules the running check certifies (``L8``, ``S1/L11``), for its failure messages."""

    # -- helpers --------------------------------------------------------------------------------
    async def win(self, store: ClaimStore, request: ClaimRequest) -> Claim:
        """Claim a slot the check expects to be won (it has no run, or the claim is a resend of
        the holder's own), and fail naming the rule under check when it is not."""
        claim = await within(store.claim(request))
        assert claim.won, (
            f"{self.checking}: the check's claim of slot {request.slot} of job {request.job!r} "
            f"must be won (a free slot, C4, or the holder's own resend, C2), got {claim}"
        )
        return claim

    @staticmethod
    async def open(harness: BackendHarness, **options: Any) -> ClaimStore:
        return await within(harness.open_store(**options), 30)

    @staticmethod
    async def open_lease(harness: BackendHarness, **options: Any) -> LeaseStore:
        store = await within(harness.open_store(**options), 30)
        assert isinstance(store, LeaseStore), (
            f"capabilities.leases is on but {type(store).__name__} is not a LeaseStore"
        )
        return store

    @staticmethod
    async def now(store: ClaimStore) -> int:
        """The store's clock (T1), or, for a store without one (``now_ms()`` is None), this
        process's wall clock: the instance clock such a store judges leases and lateness by."""
        value = await within(store.now_ms())
        return value if value is not None else time.time_ns() // 1_000_000

    async def current_slot(self, store: ClaimStore) -> int:
        """A slot that is not late: the current second by the store's clock."""
        now = await self.now(store)
        return now - now % 1000

    def request(
        self,
        job: str,
        slot: int,
        *,
        token: str | None = None,
        instance: str | None = None,
        lease_ms: int = 60_000,
        max_late_ms: int | None = None,
        overlap: Overlap = Overlap.ALLOW,
        attempts: int = 3,
        skip_reason: str | None = None,
    ) -> ClaimRequest:
        return ClaimRequest(
            job=job,
            slot=slot,
            token=token or new_token(),
            instance=instance or self.instance,
            lease_ms=lease_ms,
            max_late_ms=self.max_late_ms if max_late_ms is None else max_late_ms,
            overlap=overlap,
            attempts=attempts,
            skip_reason=skip_reason,
        )


PREFIX = DEFAULT_PREFIX
