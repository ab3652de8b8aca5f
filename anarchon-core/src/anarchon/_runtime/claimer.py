"""Sending claims: retries with the same token (C2), fail-closed answers (C3), and outages that are
logged once, not once per claim (DESIGN section 11). A store that answers a job's claims with data
anarchon cannot read (`StoreCorrupt`) makes the instance not ready until a claim of that job
succeeds again."""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Awaitable, Callable, Sequence
from typing import TypeVar

from .._claims import Claim, ClaimRequest, Outcome
from .._control import PAUSED
from .._errors import AnarchonError, StoreCorrupt, StoreUnavailable
from .._urls import redact
from .context import RuntimeContext

__all__ = ["TRANSPORT_ERRORS", "UNANSWERED", "UNCONFIRMED", "Claimer"]

log = logging.getLogger("anarchon.store")

TRANSPORT_ERRORS = (StoreUnavailable, asyncio.TimeoutError, TimeoutError, ConnectionError)
"""Errors after which a claim may be resent with the same token."""

T = TypeVar("T")

UNANSWERED = "the store did not answer before the slot turned late"
"""How the reason of a `late` answer the claimer made up itself starts: the store was down, so
nothing is recorded yet (the dispatcher records the slot once the store answers again)."""
REFUSED = "the claim failed and was not resent"
"""How the reason of an `unknown` answer the claimer made up itself starts: the store raised an
error that resending cannot fix (`StoreCorrupt`, `ConfigError`), named after it."""
UNCONFIRMED = "unconfirmed:"
"""How the reason of an `unknown` answer starts when the store took the claim but could not
confirm that it is durable (Redis ``wait_replicas``: the replicas did not acknowledge in time).
Resending the same token learns the answer (C2), so the claimer resends such a claim as after a
transport error, until it is decided or late; it never runs on it (C3)."""


def _settled(claims: Sequence[Claim]) -> Sequence[Claim]:
    """`claims`, or `StoreUnavailable` when one is unconfirmed (`UNCONFIRMED`): resend them all."""
    for claim in claims:
        if claim.outcome is Outcome.UNKNOWN and claim.reason.startswith(UNCONFIRMED):
            raise StoreUnavailable(claim.reason)
    return claims


class Claimer:
    """Sends claims for the scheduler and `once()`, resending with the same token until decided."""

    def __init__(self, context: RuntimeContext, *, timeout_s: float = 10.0) -> None:
        self.health = context.health
        self.events = context.events
        self.now_ms = context.clock.now_ms
        self.timeout_s = timeout_s
        self._stopping = asyncio.Event()

    def start(self) -> None:
        """Claims from now on resend until decided (made for the running loop)."""
        self._stopping = asyncio.Event()

    def stop(self) -> None:
        """Claims waiting to be resent give up now (shutdown)."""
        self._stopping.set()

    async def call(
        self,
        operation: str,
        make: Callable[[], Awaitable[T]],
        *,
        give_up: Callable[[], bool],
    ) -> T | None:
        """Run `make()` until it answers; None once `give_up()` is true or the claimer stops.
        Transport errors are retried with backoff; any other error is logged and gives up."""
        result = await self._call(operation, make, give_up=give_up)
        if isinstance(result, AnarchonError):
            self._log_refused(operation, result)
            return None
        return result

    async def _call(
        self, operation: str, make: Callable[[], Awaitable[T]], *, give_up: Callable[[], bool]
    ) -> T | AnarchonError | None:
        """`call`, returning the `AnarchonError` that gave up (not logged) instead of None."""
        delay = 0.05
        while True:
            try:
                result = await asyncio.wait_for(make(), self.timeout_s)
            except TRANSPORT_ERRORS as exc:
                self.health.failed(operation, exc)
            except AnarchonError as exc:
                return exc
            else:
                self.health.ok()
                return result
            if give_up() or self._stopping.is_set():
                return None
            try:
                await asyncio.wait_for(self._stopping.wait(), delay)
            except asyncio.TimeoutError:
                pass
            delay = min(delay * 2, 1.0)

    def _log_refused(self, operation: str, exc: AnarchonError) -> None:
        log.error(
            "store %s: %s failed: %s",
            self.health.store_name,
            operation,
            redact(str(exc)),
            extra={"store": self.health.store_name, "operation": operation},
        )
        self.events.store_error(store=self.health.store_name, operation=operation, error=exc)

    def _late(self, request: ClaimRequest) -> Callable[[], bool]:
        return lambda: self.now_ms() - request.slot > request.max_late_ms

    def _unreachable(self, request: ClaimRequest) -> Claim:
        return Claim(
            outcome=Outcome.LATE,
            reason=f"{UNANSWERED}: {self.health.last_error}",
        )

    def _answers(
        self,
        operation: str,
        requests: Sequence[ClaimRequest],
        answers: list[Claim] | AnarchonError | None,
    ) -> list[Claim]:
        """The claims' answers from what `_call` returned, noting in `health` whether the
        store answered their jobs with damaged data. A claim the store refused for good
        (`StoreCorrupt`, `ConfigError`) answers `unknown` (C3) with the error as its reason,
        so nobody runs it and it is not recorded as late later."""
        jobs = [r.job for r in requests]
        if answers is None:
            return [self._unreachable(r) for r in requests]
        if isinstance(answers, AnarchonError):
            if isinstance(answers, StoreCorrupt):
                self.health.corrupt(operation, jobs, answers)
            else:
                self._log_refused(operation, answers)
            reason = redact(f"{REFUSED}: {type(answers).__name__}: {answers}")
            return [Claim(outcome=Outcome.UNKNOWN, reason=reason) for _ in requests]
        self.health.answered(jobs)
        return answers

    async def claim(
        self, claim: Callable[[ClaimRequest], Awaitable[Claim]], request: ClaimRequest
    ) -> Claim:
        """Claim until decided or late (C2: same token on every resend)."""
        started = time.perf_counter()

        async def settled() -> Claim:
            (answer,) = _settled([await claim(request)])
            return answer

        answer = await self._call("claim", settled, give_up=self._late(request))
        (result,) = self._answers(
            "claim", [request], [answer] if isinstance(answer, Claim) else answer
        )
        self.decided(request, result, started)
        return result

    async def claim_many(
        self,
        claim_many: Callable[[Sequence[ClaimRequest]], Awaitable[list[Claim]]],
        requests: Sequence[ClaimRequest],
    ) -> list[Claim]:
        """Claim the jobs of one slot in one call. When it raises `StoreCorrupt` (a job's data
        is damaged), each job is claimed alone with the same token (C2: a job the batch had
        decided answers the same), so that the other jobs still run and only the damaged one
        is marked."""
        started = time.perf_counter()

        async def settled() -> list[Claim]:
            return list(_settled(await claim_many(requests)))

        answers = await self._call("claim_many", settled, give_up=self._late(requests[0]))
        if isinstance(answers, StoreCorrupt) and len(requests) > 1:
            log.debug(
                "store %s: claim_many failed (%s); claiming each job alone",
                self.health.store_name,
                redact(str(answers)),
            )
            alone = await asyncio.gather(
                *(
                    self._call("claim", _alone(claim_many, r), give_up=self._late(r))
                    for r in requests
                )
            )
            result = [
                answer
                for r, got in zip(requests, alone, strict=True)
                for answer in self._answers("claim", [r], got)
            ]
        else:
            result = self._answers("claim_many", requests, answers)
        for request, answer in zip(requests, result, strict=True):
            self.decided(request, answer, started)
        return result

    def decided(self, request: ClaimRequest, claim: Claim, started: float) -> None:
        """Log the answer (won and skipped at INFO, with structured fields; the rest at DEBUG,
        and so are ``skipped: paused`` answers: the dispatcher says once that a job is paused)
        and tell the observers (`anarchon_claim_decided`)."""
        latency_ms = (time.perf_counter() - started) * 1000
        skipped = claim.outcome is Outcome.SKIPPED
        loud = claim.won or (skipped and claim.skip_kind != PAUSED)
        level = logging.INFO if loud else logging.DEBUG
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


def _alone(
    claim_many: Callable[[Sequence[ClaimRequest]], Awaitable[list[Claim]]],
    request: ClaimRequest,
) -> Callable[[], Awaitable[list[Claim]]]:
    return lambda: claim_many([request])
