"""Retries of a run that raised (rule L12): whether and when its next try starts.

Every instance decides the same from the job's settings and the attempt alone: attempt `n`
that raised is tried again while ``n <= retries``, after ``backoff.delay_ms(n)``, unless that
would start it at or after the job's next slot (the next slot's run comes instead). Crashes use
attempts too (a takeover is the next attempt), so a crash before a failure leaves one retry fewer;
the claims allow ``attempts + retries`` attempts, so retries never use up a crash's room."""

from __future__ import annotations

import asyncio
import time

from .._retries import try_entry
from ..abc import SupportsRetry
from .claimer import TRANSPORT_ERRORS
from .handle import Run
from .jobs import JobSpec
from .store_health import StoreHealth

__all__ = ["keep_for_retry", "retry_delay_ms"]


def retry_delay_ms(spec: JobSpec, *, slot: int, attempt: int, now_ms: int) -> int | None:
    """The wait before attempt ``attempt + 1`` of `spec`'s run at `slot`, which raised at
    `now_ms` (the store-corrected clock); None when it is not tried again: no retries left, no
    schedule (`once()`), or the retry would not start before the job's next slot."""
    if spec.retries < attempt or spec.schedule is None:
        return None
    delay = spec.backoff.delay_ms(attempt)
    if now_ms + delay >= spec.schedule.next_slot(slot):
        return None
    return delay


async def keep_for_retry(
    store: SupportsRetry, run: Run, error: str, delay_ms: int, health: StoreHealth
) -> bool:
    """L12: have `store` log `run`'s failed try (`error`) and hold the run for `delay_ms`;
    resent after a transport error while the lease lasts (a resend is recognised by its token).
    False: fenced, or the lease ran out unanswered (a takeover then decides the run)."""
    entry = try_entry(run.attempt, error)
    while True:
        try:
            kept = await store.retry(run.job, run.slot, run.token, entry, delay_ms)
        except TRANSPORT_ERRORS as exc:
            health.failed("retry", exc)
            if run.deadline is not None and time.monotonic() >= run.deadline:
                return False
            await asyncio.sleep(0.1)
        else:
            health.ok()
            return kept
