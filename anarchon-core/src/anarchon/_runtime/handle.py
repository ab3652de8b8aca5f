"""`Run`: what a job function receives about the run it won, and its view of the lease (F1, F2)."""

from __future__ import annotations

import threading
import time

from .._claims import fencing_token
from .._control import is_triggered_slot
from .._errors import Fenced

__all__ = ["Run"]


class Run:
    """The run this instance won: pass it to a job by giving the function a `Run` parameter.

    `fenced` turns True once this instance can no longer be sure it holds the lease (F1): a renew
    was refused, or no renew succeeded before the local deadline; and once the job's `timeout`
    passed (the run is then recorded failed). Long sync jobs call `ensure_held()` between steps;
    async jobs are cancelled when fenced.
    """

    __slots__ = ("_deadline", "_fence_reason", "_lock", "attempt", "job", "slot", "token")

    def __init__(
        self, *, job: str, slot: int, attempt: int, token: str, deadline: float | None
    ) -> None:
        self.job = job
        self.slot = slot
        """The slot, epoch ms UTC."""
        self.attempt = attempt
        """1 for the first winner, +1 per takeover."""
        self.token = token
        self._deadline = deadline
        self._fence_reason: str | None = None
        self._lock = threading.Lock()

    @property
    def fencing_token(self) -> int:
        """F2: an int that grows strictly with (slot, attempt). Hand it to the resource you write,
        and have it refuse writes with a smaller token than it has seen."""
        return fencing_token(self.slot, self.attempt)

    @property
    def triggered(self) -> bool:
        """True for a run asked for with ``anarchon trigger`` / `store.trigger()` (X1): its slot is
        the time of the trigger, not one of the schedule's."""
        return is_triggered_slot(self.slot)

    @property
    def fenced(self) -> bool:
        """True once the lease may have passed to another instance. Checked against the local
        monotonic deadline too, so a thread that resumes after a pause sees it at once."""
        with self._lock:
            if self._fence_reason is not None:
                return True
            return self._deadline is not None and time.monotonic() >= self._deadline

    @property
    def fence_reason(self) -> str | None:
        with self._lock:
            expired = self._deadline is not None and time.monotonic() >= self._deadline
            if self._fence_reason is None and expired:
                return "no renew succeeded before the local lease deadline"
            return self._fence_reason

    def ensure_held(self) -> None:
        """Raise `Fenced` if this instance no longer holds the run's lease."""
        if self.fenced:
            raise Fenced(
                f"run {self.job}@{self.slot} attempt {self.attempt} is fenced: {self.fence_reason}"
            )

    @property
    def deadline(self) -> float | None:
        """The local end of the lease on the monotonic clock (F1); None without leases."""
        with self._lock:
            return self._deadline

    def _shorten(self, seconds: float) -> bool:
        """The store ends the lease `seconds` earlier than counted (its clock stepped); True if
        the shortened lease has run out."""
        with self._lock:
            if self._deadline is None:
                return False
            self._deadline -= seconds
            return time.monotonic() >= self._deadline

    def _extend(self, deadline: float) -> None:
        with self._lock:
            if self._fence_reason is None:
                self._deadline = deadline

    def _fence(self, reason: str) -> bool:
        """Mark fenced; True if this call did it."""
        with self._lock:
            if self._fence_reason is not None:
                return False
            self._fence_reason = reason
            return True

    def __repr__(self) -> str:
        return f"Run(job={self.job!r}, slot={self.slot}, attempt={self.attempt})"
