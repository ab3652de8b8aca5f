"""Sending claims: retries with the same token (C2), fail-closed answers (C3), and outages that are
logged once, not once per claim (DESIGN section 11)."""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Awaitable, Callable, Sequence
from typing import TypeVar

from ._claims import Claim, ClaimRequest, Outcome
from ._errors import AnarchonError, StoreUnavailable
from ._urls import redact
from .plugins import PluginManager

__all__ = ["TRANSPORT_ERRORS", "UNANSWERED", "Claimer", "StoreHealth"]

log = logging.getLogger("anarchon.store")

TRANSPORT_ERRORS = (StoreUnavailable, asyncio.TimeoutError, TimeoutError, ConnectionError)
"""Errors after which a claim may be resent with the same token."""

T = TypeVar("T")

UNANSWERED = "the store did not answer before the slot turned late"
"""How the reason of a `late` answer the claimer made up itself starts: the store was down, so
nothing is recorded yet (the dispatcher records the slot once the store answers again)."""


class StoreHealth:
    """Tracks whether the store answers; logs the start and the end of each outage once."""

    def __init__(self, store_name: str, events: PluginManager) -> None:
        self.store_name = store_name
        self.events = events
        self.down_since: float | None = None
        self.last_error: str | None = None
        self.last_ok: float | None = None

    def failed(self, operation: str, error: BaseException) -> None:
        self.last_error = redact(f"{type(error).__name__}: {error}")
        if self.down_since is None:
            self.down_since = time.monotonic()
            log.warning(
                "store %s is unreachable (%s failed: %s); retrying, claims keep their tokens",
                self.store_name,
                operation,
                self.last_error,
                extra={"store": self.store_name, "operation": operation},
            )
            self.events.store_error(store=self.store_name, operation=operation, error=error)

    def ok(self) -> None:
        self.last_ok = time.monotonic()
        if self.down_since is not None:
            log.info(
                "store %s is reachable again after %.1f s",
                self.store_name,
                self.last_ok - self.down_since,
                extra={"store": self.store_name},
            )
            self.down_since = None


class Claimer:
    """Sends claims for the scheduler and `once()`, resending with the same token until decided."""

    def __init__(
        self,
        *,
        health: StoreHealth,
        events: PluginManager,
        now_ms: Callable[[], int],
        timeout_s: float = 10.0,
    ) -> None:
        self.health = health
        self.events = events
        self.now_ms = now_ms
        self.timeout_s = timeout_s
        self.stopping = asyncio.Event()

    async def call(
        self,
        operation: str,
        make: Callable[[], Awaitable[T]],
        *,
        give_up: Callable[[], bool],
    ) -> T | None:
        """Run `make()` until it answers; None once `give_up()` is true or the claimer stops.
        Transport errors are retried with backoff; any other error is logged and gives up."""
        delay = 0.05
        while True:
            try:
                result = await asyncio.wait_for(make(), self.timeout_s)
            except TRANSPORT_ERRORS as exc:
                self.health.failed(operation, exc)
            except AnarchonError as exc:
                log.error(
                    "store %s: %s failed: %s",
                    self.health.store_name,
                    operation,
                    redact(str(exc)),
                    extra={"store": self.health.store_name, "operation": operation},
                )
                self.events.store_error(
                    store=self.health.store_name, operation=operation, error=exc
                )
                return None
            else:
                self.health.ok()
                return result
            if give_up() or self.stopping.is_set():
                return None
            try:
                await asyncio.wait_for(self.stopping.wait(), delay)
            except asyncio.TimeoutError:
                pass
            delay = min(delay * 2, 1.0)

    def _late(self, request: ClaimRequest) -> Callable[[], bool]:
        return lambda: self.now_ms() - request.slot > request.max_late_ms

    def _unreachable(self, request: ClaimRequest) -> Claim:
        return Claim(
            outcome=Outcome.LATE,
            reason=f"{UNANSWERED}: {self.health.last_error}",
        )

    async def claim(
        self, claim: Callable[[ClaimRequest], Awaitable[Claim]], request: ClaimRequest
    ) -> Claim:
        """Claim until decided or late (C2: same token on every resend)."""
        started = time.perf_counter()
        answer = await self.call(
            "claim", lambda: claim(request), give_up=self._late(request)
        ) or self._unreachable(request)
        self.decided(request, answer, started)
        return answer

    async def claim_many(
        self,
        claim_many: Callable[[Sequence[ClaimRequest]], Awaitable[list[Claim]]],
        requests: Sequence[ClaimRequest],
    ) -> list[Claim]:
        started = time.perf_counter()
        answers = await self.call(
            "claim_many", lambda: claim_many(requests), give_up=self._late(requests[0])
        )
        result = answers if answers is not None else [self._unreachable(r) for r in requests]
        for request, answer in zip(requests, result, strict=True):
            self.decided(request, answer, started)
        return result

    def decided(self, request: ClaimRequest, claim: Claim, started: float) -> None:
        """Log the answer (won and skipped at INFO, with structured fields; the rest at DEBUG)
        and tell the observers (`anarchon_claim_decided`)."""
        latency_ms = (time.perf_counter() - started) * 1000
        skipped = claim.outcome is Outcome.SKIPPED
        level = logging.INFO if claim.won or skipped else logging.DEBUG
        if log.isEnabledFor(level):
            fields: dict[str, object] = {
                "job": request.job,
                "slot": request.slot,
                "outcome": str(claim.outcome),
                "attempt": claim.attempt,
                "instance": request.instance,
                "latency_ms": round(latency_ms, 3),
            }
            if skipped:
                fields["skip"] = claim.skip_kind
                fields["reason"] = claim.reason
            log.log(
                level,
                "claim %s@%s: %s (attempt %s)%s",
                request.job,
                request.slot,
                claim.outcome,
                claim.attempt,
                f": {claim.reason}" if claim.reason else "",
                extra=fields,
            )
        self.events.claim_decided(
            store=self.health.store_name, request=request, claim=claim, latency_ms=latency_ms
        )
