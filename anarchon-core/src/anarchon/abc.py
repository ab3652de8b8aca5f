"""The backend contract: what every claim store does, with the rules it must keep.

Rule numbers (C1-C4, L1-L12, T1-T4, P1, X1, M1, R1) refer to the design document and the docs' "Leases" and
"Timing and clocks" pages. A backend is certified by the `anarchon-conformance` kit, which checks
these rules against the real store.
"""

from __future__ import annotations

import abc
from collections.abc import Mapping, Sequence
from types import TracebackType
from typing import TYPE_CHECKING, ClassVar, Protocol, runtime_checkable

from typing_extensions import Self

from ._capabilities import Capabilities
from ._claims import Claim, ClaimRequest
from ._control import Pause, Trigger
from ._fleet import Member
from ._runs import RunRecord, RunStatus

if TYPE_CHECKING:
    from ._options import StoreOptions
    from ._urls import StoreURL

__all__ = [
    "ClaimStore",
    "LeaseStore",
    "SupportsClaimMany",
    "SupportsJobList",
    "SupportsJobSetup",
    "SupportsMembership",
    "SupportsPause",
    "SupportsPrepare",
    "SupportsReadOnly",
    "SupportsRetry",
    "SupportsTrigger",
]


class ClaimStore(abc.ABC):
    """A store that decides, in one atomic step, which instance wins each run.

    Every implementation keeps:

    * **C1 single winner**: for each (job, slot, attempt) at most one `claim` returns `won`, whatever
      the number of concurrent callers, connections and processes.
    * **C2 idempotent per token**: resending a request with the same token returns `won` again while
      that token holds the run (`done` once it finished). Stores that cannot recognise their own
      claim say so in `Capabilities.self_recognition` and keep C3 instead.
    * **C3 fail closed**: an ambiguous answer is never `won`; it is `unknown`.
    * **C4 liveness**: a claim for a slot that is not late and has no run is `won` (unless the
      overlap rule or a skip decides it).
    * **C5 early claims**: C1 holds for a claim sent before its slot too. A store that remembers
      a claim for a window counted from when it is written refuses (`ConfigError`, from the
      shared `anarchon._leases.early_claim_error`) a claim it could not remember until
      ``slot + max_late_ms``.
    * **The ledger (S1)**: a claim that decides a slot is not to run (a `skip_reason` in the
      request; on lease stores also late or overlap, L1) writes a ``skipped`` record with its
      reason in the same atomic step, so that later claims of the slot answer `skipped` at once
      and `history` shows why (`Capabilities.skips`; stores that cannot keep such a record take
      the slot with it all the same, so nobody can win it).
    * **T3**: a run is remembered for at least `capabilities.remembers_ms` after its slot.

    Subclasses are constructed by `anarchon.connect(url, **options)` as ``cls(url, options)``; they
    declare their options as an attrs class in `Options` (a subclass of `StoreOptions`).
    """

    Options: ClassVar[type[StoreOptions]]
    """The attrs class of this backend's options; URL query parameters are structured into it."""

    def __init__(self, url: StoreURL, options: StoreOptions) -> None:  # noqa: B027 (a signature)
        """Build the store from its parsed URL and its options (an instance of `Options`),
        without connecting: `anarchon.connect` calls ``cls(url, options)`` then `open`.
        Subclasses keep this signature (keyword-only extras are fine)."""

    @classmethod
    def from_url(cls, url: StoreURL, options: StoreOptions) -> Self:
        """The factory `anarchon.connect` uses: ``cls(url, options)``. Override it to pick a
        subclass from the options (each strategy its own class, say)."""
        return cls(url, options)

    @property
    @abc.abstractmethod
    def capabilities(self) -> Capabilities:
        """What this store can do with its current options."""

    @abc.abstractmethod
    async def open(self) -> None:
        """Connect, and create the schema, streams or queues idempotently.

        Safe when many instances open the same empty store at once. Raises `StoreUnavailable` when the
        store cannot be reached, `StoreCorrupt` when it holds foreign data where ours should be.
        """

    @abc.abstractmethod
    async def close(self) -> None:
        """Release connections. Idempotent."""

    @abc.abstractmethod
    async def claim(self, request: ClaimRequest) -> Claim:
        """Decide `request` in one atomic step of the store (C1-C4; on lease stores L1-L6).

        Raises `StoreUnavailable` on transport errors: the caller may resend the same request (C2).
        """

    @abc.abstractmethod
    async def history(self, job: str, limit: int = 100) -> list[RunRecord]:
        """The job's most recent runs, newest slot first, at most `limit`."""

    @abc.abstractmethod
    async def now_ms(self) -> int | None:
        """The store's clock in epoch ms (T1), or None when the store has no clock of its own."""

    async def __aenter__(self) -> Self:
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        await self.close()


class LeaseStore(ClaimStore):
    """A claim store whose runs hold leases, so a crashed winner is taken over (DESIGN section 5).

    A run is ``running(attempt, token, holder, lease_until)`` or finished (``succeeded``,
    ``failed``, ``interrupted``). ``now`` is the store's clock read inside the atomic step (T1).
    `claim` keeps:

    * **L1** no run: if the slot is at or below the job's forgotten floor (L11): `late`, nothing
      written. Else if ``now - slot > max_late_ms``: record ``skipped`` (``late: ...``) and answer
      `skipped`. Else if the request has a `skip_reason`: record ``skipped`` with it. Else if
      overlap is `skip` and another slot S of the job is running with ``lease_until >= now``:
      record ``skipped`` (``overlap: slot S ...``). Else write running, attempt 1, the caller's
      token, ``lease_until = now + lease_ms``: `won` (attempt 1). A skip record has attempt 0,
      the deciding token and instance, and its reason in ``error``.
    * **L2** running with the same token: `won` (same attempt); nothing changes.
    * **L3** running, another token, ``lease_until >= now``: `running`.
    * **L4** running, ``lease_until < now``, ``attempt < attempts``: takeover, attempt + 1, the
      caller's token, a new lease: `won`. Lateness does not apply to a takeover.
    * **L5** running, lease ran out, no attempts left: mark `interrupted`, answer `done`.
    * **L6** finished (any status, any token): `done`; a ``skipped`` record answers `skipped`
      with its reason.
    * **L11** a run is kept at least until ``slot + max_late_ms + attempts * lease_ms`` plus a margin;
      the newest slot ever deleted is kept as the job's floor so a forgotten run is never won again.
    """

    @abc.abstractmethod
    async def renew(self, job: str, slot: int, token: str, lease_ms: int) -> bool:
        """**L7**: only while running with `token`, set ``lease_until = now + lease_ms``; else False."""

    @abc.abstractmethod
    async def finish(
        self, job: str, slot: int, token: str, status: RunStatus, error: str | None = None
    ) -> bool:
        """**L8**: only while running with `token`, record the final status (succeeded, failed or
        interrupted). **C2 for finish**: resent with the same token and status after the run
        finished that way (the first answer was lost), True again with nothing written. Else
        False (fenced)."""

    @abc.abstractmethod
    async def release(self, job: str, slot: int, token: str) -> bool:
        """**L9**: only while running with `token`, end the lease now so a backup takes over at once."""

    @abc.abstractmethod
    async def check(self, request: ClaimRequest) -> Claim:
        """**L10**: a backup's poll. One plain read first: finished is `done`, a live lease is
        `running`, with no write lock taken. Only a run whose lease ran out (or a missing run) goes
        through the `claim` step (L4, L5, L1)."""


@runtime_checkable
class SupportsClaimMany(Protocol):
    """Optional: claim many jobs of one slot in one round trip."""

    async def claim_many(self, requests: Sequence[ClaimRequest]) -> list[Claim]:
        """Decide each request as `claim` would, in order; the answers are in the same order."""
        ...


@runtime_checkable
class SupportsJobList(Protocol):
    """Optional: list the jobs the store knows in its prefix (``anarchon status`` reads it)."""

    async def jobs(self) -> list[str]:
        """The names of the jobs with at least one remembered run (or a floor, L11), sorted."""
        ...


@runtime_checkable
class SupportsJobSetup(Protocol):
    """Optional: set up what the store keeps per job before the first claim, and refuse settings
    that would break the rules (Redis idmp gives each job's stream its idempotency settings once,
    and refuses to change settings another instance chose, which would make Redis forget claims).

    The scheduler calls `setup_jobs` once, when it starts, with all its jobs. Setting up decides
    nothing: it writes no run, claims answer exactly as they would without it (a store must still
    set a job up at its first claim, for callers without a scheduler), and setting up twice, or
    after claims, changes no outcome."""

    async def setup_jobs(self, jobs: Sequence[str]) -> None:
        """Set up `jobs`; `ConfigError` when this instance's options conflict with what the store
        holds (the scheduler then refuses to start), `StoreUnavailable` on store errors (the
        scheduler logs it and starts: the claims set the jobs up)."""
        ...


@runtime_checkable
class SupportsPrepare(Protocol):
    """Optional: do a slot's groundwork ahead of time, so that its claims at the slot are cheap
    (RabbitMQ creates each run's queue before the slot instead of in the winning claim).

    The scheduler calls `prepare` about `prepare_ahead_ms` before a slot, with the jobs due at
    it. Preparing decides nothing: every claim of a prepared slot answers exactly as it would
    without the preparation (C1-C3 and T3 unchanged), preparing twice or after the claims changes
    no outcome, and a slot prepared but never claimed is forgotten like any other. A failed
    preparation is logged and ignored: the claim then does the work itself."""

    @property
    def prepare_ahead_ms(self) -> int:
        """How long before a slot to prepare it; 0 turns preparing off."""
        ...

    async def prepare(self, jobs: Sequence[str], slot: int) -> None:
        """Make the claims of `jobs` at `slot` cheaper when they come; raises on store errors
        (which the scheduler logs and ignores)."""
        ...


@runtime_checkable
class SupportsReadOnly(Protocol):
    """Optional: open the store to read it, creating and changing nothing (rule R1).

    ``anarchon history``, ``status`` and ``dashboard`` open stores this way, so that a monitoring
    user with read-only rights can use them and a typo in a URL leaves nothing behind. After
    `open_read_only`, `history`, `now_ms` and (with `SupportsJobList`) `jobs` work as after
    `open`; claims and lease calls are not made on such a store."""

    async def open_read_only(self) -> None:
        """Connect without creating or altering anything: no file, schema, table, function,
        stream, queue, key or setting. `StoreNotSetUp` when the store holds no anarchon data
        under these options (naming where it looked and the options that choose the place);
        `StoreUnavailable` and `ConfigError` as for `open`."""
        ...


@runtime_checkable
class SupportsPause(Protocol):
    """Optional: pause and resume a job for every instance at once (rule **P1**), where
    `capabilities.pause` is True.

    P1: while a job is paused (a pause is stored and, by the store's clock, before its
    `until_ms`), a claim of a slot that has no run yet answers `skipped` and records the skip
    with the reason ``paused`` (``paused: <the pause's reason>`` when it has one) in the same
    atomic step (S1), whatever the request says; so no instance can start a paused job,
    whatever its view of the world. Runs made before the pause are unaffected: renew, finish,
    release and takeovers (L4) go on. After `resume` (or `until_ms`), claims answer as if there
    had been no pause; slots already decided stay decided."""

    async def pause(
        self, job: str, *, until_ms: int | None = None, reason: str = "", by: str = ""
    ) -> Pause:
        """Pause `job` (replacing any pause of it) until `until_ms` (epoch ms) or `resume`."""
        ...

    async def resume(self, job: str) -> bool:
        """End the pause of `job`; False if it was not paused."""
        ...

    async def pauses(self) -> list[Pause]:
        """The pauses in force (not ended by `until_ms`), sorted by job. Works on a store
        opened read-only (R1)."""
        ...


@runtime_checkable
class SupportsTrigger(Protocol):
    """Optional: run a job now, once, on one instance (rule **X1**), where
    `capabilities.trigger` is True.

    X1: `trigger` writes a `Trigger` whose ad-hoc slot is the store's time of the call, never on
    a whole second (so never a scheduled slot), distinct from every other trigger of the job;
    `triggers` lists it to every instance for at least `capabilities.remembers_ms` (or a day
    where that is None). The runs of triggered slots are claimed, leased, fenced, taken over and
    recorded exactly as scheduled ones (C1-C5, L1-L11), so one instance wins each."""

    async def trigger(self, job: str, *, reason: str = "", by: str = "") -> Trigger:
        """Ask for a run of `job` now; the returned trigger names its slot."""
        ...

    async def triggers(self, since_ms: int) -> list[Trigger]:
        """Triggers written at or after `since_ms` (epoch ms), oldest first. Works on a store
        opened read-only (R1)."""
        ...


@runtime_checkable
class SupportsRetry(Protocol):
    """Optional: try a failed run again (rule **L12**), on a `LeaseStore` whose
    `capabilities.retries` is True.

    L12 `retry(job, slot, token, error, delay_ms)`: only while the run is running with `token`,
    append `error` (an entry such as ``attempt 1 failed: ValueError: ...``) to the run's try log
    (`RunRecord.error`, joined by `anarchon._retries.TRY_SEPARATOR`, the oldest text dropped
    beyond `MAX_TRY_LOG_CHARS`) and set ``lease_until = now + delay_ms`` by the store's clock; the
    run stays running with that token. So no claim wins it before then (L3), and the first claim
    or `check` after it takes it over as attempt + 1 with a new token and fencing token (L4) when
    the claimer's `attempts` allow (the runtime sends ``attempts + retries``), or marks it
    interrupted (L5). Answers True. Resent with the same token while the run is still running
    with it (the first answer was lost): True again. Else False (fenced: another attempt holds or
    finished the run; nothing written).

    `finish` keeps the try log of a retried run: the final status's error, if any, is appended
    to it, and a run that succeeds after failed tries keeps the log in `error`; so does L5, whose
    entry (``lease of attempt N ran out with no attempts left``) is appended likewise. A store that
    sweeps old runs never deletes a run whose lease (here: its wait) is still alive."""

    async def retry(self, job: str, slot: int, token: str, error: str, delay_ms: int) -> bool:
        """L12: record the failed try and let another attempt take the run after `delay_ms`."""
        ...


@runtime_checkable
class SupportsMembership(Protocol):
    """Optional: the fleet's member list (rule **M1**), where `capabilities.membership` is True.

    M1: `announce(instance, ttl_ms, stats)` writes or refreshes one member in one round trip:
    live until ``now + ttl_ms`` by the store's clock (T1; the writer's clock on stores without
    one), its first heartbeat since it joined kept as `started_ms`, its `stats` replaced. `members`
    returns every live member (``until_ms >= now``) in one round trip, sorted by instance id; a
    member whose ttl ran out is not returned (a store may delete it then). `leave` removes a member
    at once (graceful shutdown). The list only shapes load (DESIGN section 12): claims stay
    correct whatever it says."""

    async def announce(
        self, instance: str, ttl_ms: int, stats: Mapping[str, int] | None = None
    ) -> Member:
        """M1: heartbeat of `instance`, live for `ttl_ms`; returns the member as stored."""
        ...

    async def members(self) -> list[Member]:
        """M1: the live members, sorted by instance. Works on a store opened read-only (R1)."""
        ...

    async def leave(self, instance: str) -> bool:
        """M1: remove `instance` now; False if it was not a member."""
        ...
