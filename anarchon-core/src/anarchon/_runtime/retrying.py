"""Retries of a run that raised (rule L12): whether and when its next try starts.

Every instance decides the same from the job's settings and the attempt alone: attempt `n`
that raised is tried again while ``n <= retries``, after ``backoff.delay_ms(n)``, unless that
would start it at or after the job's next slot (the next slot's run comes instead). Crashes use
attempts too (a takeover is the next attempt), so a crash before a failure leaves one retry fewer;
the claims allow ``attempts + retries`` attempts, so retries never use up a crash's room."""

from __future__ import annotations

from .jobs import JobSpec

__all__ = ["retry_delay_ms"]


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
