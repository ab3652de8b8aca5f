"""What a store remembers of a run, as returned by `history` and the conformance backdoors, and
what `history` says of runs it cannot read (`DamagedHistory`)."""

from __future__ import annotations

import enum
from collections.abc import Callable, Sequence
from typing import Any

import attrs

from ._claims import MAX_ATTEMPTS, MAX_SLOT_MS, fencing_token
from ._errors import StoreCorrupt
from ._names import shown

__all__ = ["DamagedHistory", "DamagedRun", "HistoryReader", "RunRecord", "RunStatus"]

EARLIEST_MS = -62_135_596_800_000
"""0001-01-01T00:00:00Z in epoch ms: a stored time before it (or after `MAX_SLOT_MS`) is no
time anarchon wrote, and no date can show it."""


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
        `StoreCorrupt` naming the run, `where` (the file or table) and the field that is wrong,
        never a crash."""
        slot, status, attempt, token, holder, claimed_at, lease_until, finished_at, error = row
        name = f"run of job {job!r} at slot {shown(slot)} in {where}"
        fix = "remove or repair the row"
        if not (_is_int(slot) and 0 <= slot <= MAX_SLOT_MS):
            raise StoreCorrupt(
                f"a run of job {job!r} in {where} has slot {shown(slot)}; expected an integer "
                f"from 0 to {MAX_SLOT_MS} (epoch milliseconds): {fix}"
            )
        try:
            parsed = RunStatus(status)
        except ValueError:
            raise StoreCorrupt(
                f"{name} has status {shown(status)}, which anarchon never writes (expected one "
                f"of {', '.join(s.value for s in RunStatus)}): {fix}"
            ) from None
        lowest = 0 if parsed is RunStatus.SKIPPED else 1
        if not (_is_int(attempt) and lowest <= attempt <= MAX_ATTEMPTS):
            raise StoreCorrupt(
                f"{name} has attempt {shown(attempt)}; expected an integer from {lowest} to "
                f"{MAX_ATTEMPTS} for a {parsed.value} run: {fix}"
            )
        for field, value in (
            ("claimed_at", claimed_at),
            ("lease_until", lease_until),
            ("finished_at", finished_at),
        ):
            if value is not None and not (_is_int(value) and EARLIEST_MS <= value <= MAX_SLOT_MS):
                raise StoreCorrupt(
                    f"{name} has {field} {shown(value)}; expected epoch milliseconds from "
                    f"{EARLIEST_MS} to {MAX_SLOT_MS} (the years 1 to 9999): {fix}"
                )
        for field, value in (("token", token), ("holder", holder)):
            if not isinstance(value, str):
                raise StoreCorrupt(f"{name} has {field} {shown(value)}; expected text: {fix}")
        if error is not None and not isinstance(error, str):
            raise StoreCorrupt(f"{name} has error {shown(error)}; expected text: {fix}")
        if parsed is RunStatus.RUNNING and lease_until is None:
            raise StoreCorrupt(f"{name} is running with no lease_until: {fix}")
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


@attrs.frozen(kw_only=True)
class DamagedRun:
    """A stored run that `history` could not read: the row, key or message, and what is wrong."""

    job: str
    key: str
    """How the store names it: ``slot 'abc'`` (a row's slot column, as stored), ``{cron:j}:runs
    field 17000`` (Redis), ``message 42 of stream ANARCHON_cron`` (NATS)."""
    problem: str
    """What is wrong and how to fix it: the `StoreCorrupt` message."""
    slot: int | None = None
    """The run's slot when that much could be read (to place it among the good runs)."""


class DamagedHistory(StoreCorrupt):
    """`history` found stored runs it cannot read, and read the others.

    A `StoreCorrupt`, so a caller that needs every run fails as before; a caller that shows
    what it can (``anarchon history``, ``anarchon status``) catches it and reads `records`, the
    runs that were read (newest slot first, as `history` returns them), and `damaged`, the
    others in the order the store gave them. Together they are at most the `limit` asked for.
    The message names the first damaged run and counts the others.
    """

    def __init__(
        self, job: str, records: Sequence[RunRecord], damaged: Sequence[DamagedRun]
    ) -> None:
        if not damaged:
            raise ValueError("DamagedHistory needs at least one damaged run")
        self.job = job
        self.records: list[RunRecord] = list(records)
        self.damaged: list[DamagedRun] = list(damaged)
        more = len(self.damaged) - 1
        super().__init__(
            f"{len(self.damaged)} stored run(s) of job {job!r} cannot be read, "
            f"{len(self.records)} can: {self.damaged[0].problem}"
            + (f" (and {more} more damaged run(s))" if more else "")
        )

    def __reduce__(self) -> tuple[Any, ...]:
        return (type(self), (self.job, self.records, self.damaged))


class HistoryReader:
    """Reads a job's stored runs one by one for `history`: a run that cannot be read is kept
    aside as a `DamagedRun` instead of failing the whole job.

    ``reader.read(lambda: RunRecord.from_row(row, ...), key="slot 'abc'", slot=row[0])`` for
    each run, then ``reader.result()``: the runs, or `DamagedHistory` when any was damaged."""

    def __init__(self, job: str) -> None:
        self.job = job
        self.records: list[RunRecord] = []
        self.damaged: list[DamagedRun] = []

    def read(self, read: Callable[[], RunRecord], *, key: str, slot: object = None) -> None:
        """Add the run `read()` returns; if it raises `StoreCorrupt`, note it as damaged."""
        try:
            record = read()
        except StoreCorrupt as exc:
            self.damage(key, str(exc), slot=slot)
        else:
            self.records.append(record)

    def damage(self, key: str, problem: str, *, slot: object = None) -> None:
        """Note a damaged run found without reading it (a key of the wrong type, say)."""
        self.damaged.append(
            DamagedRun(job=self.job, key=key, problem=problem, slot=_readable_slot(slot))
        )

    def result(self, records: list[RunRecord] | None = None) -> list[RunRecord]:
        """The runs read, or `DamagedHistory` with them when any was damaged. `records`: the
        runs to answer instead of those `read` collected (a store that reads its runs in
        another order, or more than it answers, and picks them itself)."""
        records = self.records if records is None else records
        if self.damaged:
            raise DamagedHistory(self.job, records, self.damaged)
        return records


def _is_int(value: object) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def _readable_slot(value: object) -> int | None:
    if isinstance(value, int) and not isinstance(value, bool) and 0 <= value <= MAX_SLOT_MS:
        return value
    return None
