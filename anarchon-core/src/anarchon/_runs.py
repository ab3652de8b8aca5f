"""What a store remembers of a run, as returned by `history` and the conformance backdoors."""

from __future__ import annotations

import enum
from collections.abc import Sequence
from typing import Any

import attrs

from ._claims import fencing_token
from ._errors import StoreCorrupt

__all__ = ["RunRecord", "RunStatus"]


class RunStatus(str, enum.Enum):
    """The state of a run (DESIGN section 5)."""

    RUNNING = "running"
    SUCCEEDED = "succeeded"
    FAILED = "failed"
    INTERRUPTED = "interrupted"
    """The last attempt's lease ran out with no attempts left (L5)."""
    SKIPPED = "skipped"
    """Decided not to run (the ledger): overlap, late, coalesced catch-up; `RunRecord.error`
    holds the reason, which starts with its kind (``overlap: ...``). Attempt 0: nobody ran it."""
    CLAIMED = "claimed"
    """Backends without leases: the run was claimed; nothing more is known."""

    @property
    def finished(self) -> bool:
        """The run is over: succeeded, failed, interrupted, or skipped (nothing more happens)."""
        return self in (
            RunStatus.SUCCEEDED,
            RunStatus.FAILED,
            RunStatus.INTERRUPTED,
            RunStatus.SKIPPED,
        )

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
    """Why a run failed, or the reason of a skip (``overlap: slot ... holds a live lease``)."""

    @property
    def fencing_token(self) -> int:
        """F2: grows strictly with (slot, attempt)."""
        return fencing_token(self.slot, self.attempt)

    @classmethod
    def from_row(cls, row: Sequence[Any], *, job: str, where: str) -> RunRecord:
        """Read a stored row ``(slot, status, attempt, token, holder, claimed_at, lease_until,
        finished_at, error)``, checking every value: data anarchon did not write is a
        `StoreCorrupt` naming the run and `where` (the file or table), never a crash."""
        slot, status, attempt, token, holder, claimed_at, lease_until, finished_at, error = row
        name = f"run of job {job!r} at slot {slot!r} in {where}"
        try:
            parsed = RunStatus(status)
        except ValueError:
            raise StoreCorrupt(
                f"{name} has status {status!r}, which anarchon never writes (expected one of "
                + ", ".join(s.value for s in RunStatus)
                + "); remove or repair the row"
            ) from None
        lowest = 0 if parsed is RunStatus.SKIPPED else 1
        if not (_is_int(slot) and _is_int(attempt) and attempt >= lowest):
            raise StoreCorrupt(f"{name} has attempt {attempt!r}; expected an integer >= {lowest}")
        for field, value in (
            ("claimed_at", claimed_at),
            ("lease_until", lease_until),
            ("finished_at", finished_at),
        ):
            if value is not None and not _is_int(value):
                raise StoreCorrupt(f"{name} has {field} {value!r}; expected epoch milliseconds")
        if not isinstance(token, str) or not isinstance(holder, str):
            raise StoreCorrupt(f"{name} has token {token!r} and holder {holder!r}; expected text")
        if error is not None and not isinstance(error, str):
            raise StoreCorrupt(f"{name} has error {error!r}; expected text")
        if parsed is RunStatus.RUNNING and lease_until is None:
            raise StoreCorrupt(f"{name} is running with no lease_until")
        return cls(
            job=job,
            slot=slot,
            status=parsed,
            attempt=attempt,
            token=token,
            holder=holder,
            claimed_at=claimed_at,
            lease_until=lease_until,
            finished_at=finished_at,
            error=error,
        )


def _is_int(value: object) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)
