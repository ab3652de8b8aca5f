"""Everything a claim store needs, in one public module: what in-tree backends use, third parties
use too.

A backend subclasses `ClaimStore` or `LeaseStore` (the contract and its rules are documented
there), declares its options as an attrs subclass of `StoreOptions`, and registers itself with
the ``anarchon_backends`` hook. Stores that decide in Python call `decide_claim` and
`decide_finish` inside their atomic step, so the lease rules L1-L11 are written once; stores
that decide inside the server (Lua, SQL) implement the same table, and the conformance kit
(``anarchon-conformance``) checks either against the real store.

Importing this module loads neither the scheduler nor the CLI.
"""

from __future__ import annotations

from ._capabilities import Capabilities
from ._claims import (
    MAX_ATTEMPTS,
    MAX_SKIP_REASON,
    MAX_SLOT_MS,
    Claim,
    ClaimRequest,
    Outcome,
    Overlap,
    fencing_token,
    new_token,
    skip_kind,
)
from ._control import (
    MAX_CONTROL_TEXT,
    PAUSED,
    Pause,
    Trigger,
    check_control_text,
    check_until,
    is_triggered_slot,
    next_trigger_slot,
    pause_skip_reason,
)
from ._errors import (
    AnarchonError,
    ConfigError,
    Fenced,
    StoreCorrupt,
    StoreNotSetUp,
    StoreUnavailable,
    tls_error,
)
from ._fleet import Member, contenders, rendezvous_score
from ._leases import (
    INTERRUPTED_REASON,
    SWEEP_EVERY_DIVISOR,
    SWEEP_EVERY_MAX,
    claim_from_outcome,
    decide_claim,
    decide_finish,
    early_claim_error,
    judge_window,
    keep_until,
    late_reason,
    overlap_reason,
    skip_record,
    skipped_claim,
    sweep_every,
    sweeps_now,
)
from ._members import (
    MAX_MEMBER_TTL_MS,
    MAX_STATS,
    MIN_MEMBER_TTL_MS,
    check_announce,
    joined_at,
    read_member,
    read_stats,
    stats_text,
)
from ._names import check_instance, shown
from ._options import (
    DurationMs,
    DurationMsOrZero,
    StoreOptions,
    converter,
    structure_options,
    valid_option_names,
)
from ._retries import MAX_TRY_LOG_CHARS, TRY_SEPARATOR, append_try, try_entry
from ._runs import EARLIEST_MS, DamagedHistory, DamagedRun, HistoryReader, RunRecord, RunStatus
from ._urls import StoreURL, redact, shown_url
from .abc import (
    ClaimStore,
    LeaseStore,
    SupportsClaimMany,
    SupportsJobList,
    SupportsJobSetup,
    SupportsMembership,
    SupportsPause,
    SupportsPrepare,
    SupportsReadOnly,
    SupportsRetry,
    SupportsTrigger,
)

__all__ = [
    "EARLIEST_MS",
    "INTERRUPTED_REASON",
    "LEASE_STORE",
    "MAX_ATTEMPTS",
    "MAX_CONTROL_TEXT",
    "MAX_MEMBER_TTL_MS",
    "MAX_SKIP_REASON",
    "MAX_SLOT_MS",
    "MAX_STATS",
    "MAX_TRY_LOG_CHARS",
    "MIN_MEMBER_TTL_MS",
    "PAUSED",
    "SWEEP_EVERY_DIVISOR",
    "SWEEP_EVERY_MAX",
    "TRY_SEPARATOR",
    "AnarchonError",
    "Capabilities",
    "Claim",
    "ClaimRequest",
    "ClaimStore",
    "ConfigError",
    "DamagedHistory",
    "DamagedRun",
    "DurationMs",
    "DurationMsOrZero",
    "Fenced",
    "HistoryReader",
    "LeaseStore",
    "Member",
    "Outcome",
    "Overlap",
    "Pause",
    "RunRecord",
    "RunStatus",
    "StoreCorrupt",
    "StoreNotSetUp",
    "StoreOptions",
    "StoreURL",
    "StoreUnavailable",
    "SupportsClaimMany",
    "SupportsJobList",
    "SupportsJobSetup",
    "SupportsMembership",
    "SupportsPause",
    "SupportsPrepare",
    "SupportsReadOnly",
    "SupportsRetry",
    "SupportsTrigger",
    "Trigger",
    "append_try",
    "check_announce",
    "check_control_text",
    "check_instance",
    "check_until",
    "claim_from_outcome",
    "contenders",
    "converter",
    "decide_claim",
    "decide_finish",
    "early_claim_error",
    "fencing_token",
    "is_triggered_slot",
    "joined_at",
    "judge_window",
    "keep_until",
    "late_reason",
    "new_token",
    "next_trigger_slot",
    "overlap_reason",
    "pause_skip_reason",
    "read_member",
    "read_stats",
    "redact",
    "rendezvous_score",
    "shown",
    "shown_url",
    "skip_kind",
    "skip_record",
    "skipped_claim",
    "stats_text",
    "structure_options",
    "sweep_every",
    "sweeps_now",
    "tls_error",
    "try_entry",
    "valid_option_names",
]

LEASE_STORE = Capabilities(
    leases=True,
    self_recognition=True,
    fencing=True,
    overlap=True,
    history=True,
    store_clock=True,
    skips=True,
)
"""The capabilities of a full lease store that keeps every rule (L1-L11, S1) by its own clock.
Derive the rest with ``attrs.evolve(LEASE_STORE, batch=True)`` or ``store_clock=False`` for a
store with no clock of its own."""
