"""The values a claim is made of: the request, the answer, and the outcomes (DESIGN section 3)."""

from __future__ import annotations

import enum
import secrets

import attrs

from ._durations import MAX_LEASE_MS
from ._errors import ConfigError
from ._names import check_instance, check_name, shown

__all__ = [
    "MAX_ATTEMPTS",
    "MAX_LEASE_MS",
    "MAX_SKIP_REASON",
    "MAX_SLOT_MS",
    "Claim",
    "ClaimRequest",
    "Outcome",
    "Overlap",
    "fencing_token",
    "new_token",
    "parse_overlap",
    "skip_kind",
]

MAX_ATTEMPTS = 999
"""Attempts per run are bounded so that a fencing token fits in a signed 64-bit integer (F2)."""
MAX_SKIP_REASON = 200
"""Characters a caller's skip reason may have (`ClaimRequest.skip_reason`)."""
MAX_SLOT_MS = 253_402_300_799_999
"""The last slot: 9999-12-31T23:59:59.999Z in epoch milliseconds, the end of what `datetime`
represents. Slots are 0 to this; its fencing token (`fencing_token` at `MAX_ATTEMPTS`) is about
2.5e17, and every sum a store makes of a slot and its durations stays far below 2**63, so every
store holds them in a signed 64-bit integer."""


class Outcome(str, enum.Enum):
    """What a claim decided for the instance that sent it."""

    WON = "won"
    """The instance holds the run and runs the job (attempt > 1: a takeover)."""
    RUNNING = "running"
    """Another instance holds a live lease; the caller becomes a backup (L10)."""
    DONE = "done"
    """The run is over: succeeded, failed or interrupted."""
    LATE = "late"
    """No run exists and the slot can no longer be claimed; `Claim.reason` says why."""
    SKIPPED = "skipped"
    """The slot is decided not to run, and the store records it (the ledger): `Claim.reason`
    starts with the kind (``overlap:``, ``late:``, ``coalesced:``) and says why. The claim that
    decided the skip wrote the record in its atomic step; later claims of the slot answer the
    same."""
    LOST = "lost"
    """(Backends without leases) another token won the run."""
    UNKNOWN = "unknown"
    """The store may have taken the claim and cannot tell (C3): treated as lost."""

    def __str__(self) -> str:
        return self.value


class Overlap(str, enum.Enum):
    """Whether a new slot may start while an earlier run of the same job still holds a lease."""

    SKIP = "skip"
    ALLOW = "allow"

    def __str__(self) -> str:
        return self.value


def skip_kind(reason: str | None) -> str:
    """The kind of a skip reason: the word before its first colon (``overlap: slot ...``)."""
    if not reason:
        return "unknown"
    return reason.split(":", 1)[0].strip() or "unknown"


def new_token() -> str:
    """Return a fresh claim token: 128 random bits as 32 lowercase hex characters."""
    return secrets.token_hex(16)


def fencing_token(slot: int, attempt: int) -> int:
    """The F2 fencing token of a run attempt: grows strictly with (slot, attempt) for a job."""
    return slot * (MAX_ATTEMPTS + 1) + attempt


def _check_job(_: object, attribute: attrs.Attribute[str], value: str) -> None:
    check_name(value, what="job name")


def _check_token(_: object, attribute: attrs.Attribute[str], value: str) -> None:
    if not isinstance(value, str) or len(value) != 32 or value.strip("0123456789abcdef"):
        raise ConfigError(
            f"token must be 32 lowercase hex characters (use anarchon.new_token()), got {value!r}"
        )


def _check_slot(_: object, attribute: attrs.Attribute[int], value: int) -> None:
    if isinstance(value, bool) or not isinstance(value, int) or not 0 <= value <= MAX_SLOT_MS:
        raise ConfigError(
            f"slot must be an int from 0 to {MAX_SLOT_MS} (epoch milliseconds up to the end of "
            f"year 9999), got {shown(value)}"
        )


def _check_lease(_: object, attribute: attrs.Attribute[int], value: int) -> None:
    if isinstance(value, bool) or not isinstance(value, int) or not 0 < value <= MAX_LEASE_MS:
        raise ConfigError(
            f"lease_ms must be an int from 1 to {MAX_LEASE_MS} (a day), got {shown(value)}: a "
            "lease is how long a crashed winner blocks its job, and the runner renews it"
        )


def _check_max_late(_: object, attribute: attrs.Attribute[int], value: int) -> None:
    if isinstance(value, bool) or not isinstance(value, int) or not 0 <= value <= MAX_SLOT_MS:
        raise ConfigError(
            f"max_late_ms must be an int from 0 to {MAX_SLOT_MS} (no slot is older), "
            f"got {shown(value)}"
        )


def _check_instance(_: object, attribute: attrs.Attribute[str], value: str) -> None:
    check_instance(value, what="instance")


def parse_overlap(value: object, *, what: str = "overlap") -> Overlap:
    """`Overlap` from itself or its name in any case (``"skip"``, ``"SKIP"``), or `ConfigError`."""
    if isinstance(value, Overlap):
        return value
    if isinstance(value, str):
        for choice in Overlap:
            if value.strip().lower() == choice.value:
                return choice
    raise ConfigError(
        f"{what} must be 'skip' or 'allow' (in any case), got {shown(value)}: 'skip' starts no "
        "run while an earlier run of the job holds a lease"
    )


def _check_attempts(_: object, attribute: attrs.Attribute[int], value: int) -> None:
    if isinstance(value, bool) or not isinstance(value, int) or not 1 <= value <= MAX_ATTEMPTS:
        raise ConfigError(f"attempts must be an int from 1 to {MAX_ATTEMPTS}, got {value!r}")


def _check_skip_reason(_: object, attribute: attrs.Attribute[str | None], value: object) -> None:
    if value is None:
        return
    if (
        not isinstance(value, str)
        or not 0 < len(value) <= MAX_SKIP_REASON
        or not value.isprintable()
        or ":" not in value
    ):
        raise ConfigError(
            f"skip_reason must be printable text of 1 to {MAX_SKIP_REASON} characters that starts "
            f"with its kind and a colon (like 'coalesced: a newer slot ran'), got {value!r}"
        )


@attrs.frozen(kw_only=True)
class ClaimRequest:
    """One instance's request to run `job` at `slot`.

    The token is new for every claim attempt and never reused, except that a claim which failed on a
    transport error is resent with the same token (C2).
    """

    job: str = attrs.field(validator=_check_job)
    slot: int = attrs.field(validator=_check_slot)
    """Fire instant of the schedule, epoch milliseconds UTC: 0 to `MAX_SLOT_MS`."""
    token: str = attrs.field(factory=new_token, validator=_check_token)
    instance: str = attrs.field(validator=_check_instance)
    """Who is asking; recorded as the holder and shown in history. Printable text of 1 to
    `MAX_INSTANCE_LENGTH` characters (`check_instance`)."""
    lease_ms: int = attrs.field(default=60_000, validator=_check_lease)
    """1 ms to `MAX_LEASE_MS` (a day): a longer lease would let a crashed winner block its job
    that long, and the runner renews a lease every heartbeat, so no job needs one."""
    max_late_ms: int = attrs.field(default=60_000, validator=_check_max_late)
    """0 to `MAX_SLOT_MS`: the largest means "never late" (no slot is older). Jobs are bounded
    tighter (`MAX_LATE_MS`, 31 days)."""
    overlap: Overlap = attrs.field(default=Overlap.SKIP, converter=parse_overlap)
    """An `Overlap`, or its name in any case."""
    attempts: int = attrs.field(default=3, validator=_check_attempts)
    skip_reason: str | None = attrs.field(default=None, validator=_check_skip_reason)
    """Set: decide the slot as skipped for this reason instead of running it, if it has no run
    yet (catch-up ``latest`` records older slots ``coalesced: ...``), in the claim's atomic step
    (L1). A slot that already has a run answers as it would without it; a late slot is recorded
    late. Stores without leases take the slot with a skip record in place of a claim, so nobody
    can win it; those that cannot read records back answer later claims `lost`."""


@attrs.frozen(kw_only=True)
class Claim:
    """The store's answer to a `ClaimRequest`."""

    outcome: Outcome
    attempt: int = 0
    """The run's attempt number (1, then +1 per takeover); 0 when no run exists."""
    token: str | None = None
    """The token holding (or that last held) the run, when the store knows it."""
    holder: str | None = None
    """The instance holding (or that last held) the run, when the store knows it."""
    lease_until: int | None = None
    """End of the current lease, epoch ms by the store's clock; None without leases."""
    reason: str = ""
    """Why, in words, for `late`, `skipped`, `done` and `unknown`; a skip's reason starts with
    its kind (``overlap:``, ``late:``, ``coalesced:``)."""

    @property
    def skip_kind(self) -> str | None:
        """For `skipped`: the kind of skip (``overlap``, ``late``, ``coalesced``...); else None."""
        if self.outcome is not Outcome.SKIPPED:
            return None
        return skip_kind(self.reason)

    @property
    def won(self) -> bool:
        """True only for `Outcome.WON`."""
        return self.outcome is Outcome.WON
