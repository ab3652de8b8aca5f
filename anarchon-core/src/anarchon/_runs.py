"""What a store remembers of a run, as returned by `history` and the conformance backdoors."""

from __future__ import annotations

import enum

import attrs

from ._claims import fencing_token

__all__ = ["RunRecord", "RunStatus"]


class RunStatus(str, enum.Enum):
    """The state of a run (DESIGN section 5)."""

    RUNNING = "running"
    SUCCEEDED = "succeeded"
    FAILED = "failed"
    INTERRUPTED = "interrupted"
    """The last attempt's lease ran out with no attempts left (L5)."""
    CLAIMED = "claimed"
    """Backends without leases: the run was claimed; nothing more is known."""

    @property
    def finished(self) -> bool:
        return self in (RunStatus.SUCCEEDED, RunStatus.FAILED, RunStatus.INTERRUPTED)

    def __str__(self) -> str:
        return self.value


@attrs.frozen(kw_only=True)
class RunRecord:
    """One run (job, slot) as the store holds it."""

    job: str
    slot: int
    status: RunStatus
    attempt: int
    token: str
    holder: str
    claimed_at: int | None = None
    """When the current attempt was claimed, epoch ms by the store's clock."""
    lease_until: int | None = None
    finished_at: int | None = None
    error: str | None = None

    @property
    def fencing_token(self) -> int:
        """F2: grows strictly with (slot, attempt)."""
        return fencing_token(self.slot, self.attempt)
