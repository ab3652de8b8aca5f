"""What a NATS strategy is: the shape of its claims on the stream, and what it does with them.

Every strategy makes a claim one JetStream publish that only the first instance of a run can
store, and reads a refused or duplicate publish back to compare tokens (C2). What differs from
one strategy to the next is small and declared here: the subjects (`pattern`, `subject`,
`job_subjects`, `slot_of`), the headers that make a second publish of a run fail (`headers`),
which refusal means "the run's subject is taken" (`taken`), the stream's duplicate window, and how
long the stream remembers a run (`remembers_ms`, T3).

The work itself is shared and lives in its own modules: one claim in `_claim`, many at once in
`_batch`, the history in `_history`, the stream's setup in `_stream`. A strategy holds no
connection: it is built from the options before the store connects (`strategy_for`), and the
store hands its open `Link` to each call.
"""

from __future__ import annotations

import abc
from collections.abc import Sequence
from typing import TYPE_CHECKING, ClassVar

from anarchon import Capabilities, Claim, ClaimRequest, RunRecord
from anarchon.backend import judge_window

from .._batch import claim_all
from .._claim import claim_one, wall_ms
from .._history import read_history, read_jobs
from .._stream import ensure_stream, find_stream

if TYPE_CHECKING:
    from nats.js.errors import APIError

    from .._connection import Link
    from .._options import NATSOptions

__all__ = ["Strategy"]


class Strategy(abc.ABC):
    """One way to claim on a NATS stream (the ``strategy`` option): subclasses declare the
    shape; `claim`, `claim_many`, `history` and `setup` are shared."""

    name: ClassVar[str]
    """The ``strategy`` option that selects this class."""
    per_slot: ClassVar[bool] = False
    """Whether each run has a subject of its own (`history` then reads only the newest)."""

    def __init__(self, options: NATSOptions) -> None:
        self.options = options
        self.prefix = options.prefix
        self.stream = options.stream_name
        self._memory = f"stream {self.stream}"

    def __repr__(self) -> str:
        return f"{type(self).__name__}(stream={self.stream!r})"

    # -- what each strategy declares -------------------------------------------------------------
    @property
    @abc.abstractmethod
    def pattern(self) -> str:
        """The stream's subjects: every claim of this prefix and no other strategy's."""

    @abc.abstractmethod
    def subject(self, job: str, slot: int) -> str:
        """Where the claim of (job, slot) is published."""

    @abc.abstractmethod
    def job_subjects(self, job: str) -> str:
        """Every claim of `job`, as a subject filter."""

    def slot_of(self, subject: str) -> int | None:
        """The slot a claim's subject names, or None when it names none."""
        return None

    @abc.abstractmethod
    def headers(self, request: ClaimRequest) -> dict[str, str]:
        """The headers that let only the first publish of the run be stored."""

    def taken(self, exc: APIError) -> bool:
        """Whether the stream refused a publish because the run's subject already holds its
        claim (the claim is then read back by subject)."""
        return False

    @property
    @abc.abstractmethod
    def remembers_ms(self) -> int:
        """How long the stream knows a run after its slot (T3), counted from the claim's
        write."""

    @property
    def duplicate_window_ms(self) -> int:
        """The stream's duplicate window; 0 leaves the server's default."""
        return 0

    # -- shared ----------------------------------------------------------------------------------
    @property
    def capabilities(self) -> Capabilities:
        return Capabilities(
            leases=False,
            self_recognition=True,
            fencing=False,
            overlap=False,
            history=True,
            store_clock=False,
            skips=True,
            batch=True,
            remembers_ms=self.remembers_ms,
        )

    def judge(self, request: ClaimRequest) -> Claim | None:
        """`late` (publish nothing) or None by this instance's clock (T4); `ConfigError` for a
        claim so far ahead of its slot that the stream could forget it while the slot can still
        be claimed (C5)."""
        return judge_window(request, wall_ms(), remembers_ms=self.remembers_ms, memory=self._memory)

    async def setup(self, link: Link) -> None:
        """Create the stream, or check the one that exists (`ConfigError` when it differs)."""
        await ensure_stream(link.js, self, self.options, link.where)

    async def find(self, link: Link) -> None:
        """Read-only: check that the stream exists and holds this strategy's claims
        (`StoreNotSetUp`, `ConfigError`); nothing is created or changed."""
        await find_stream(link, self, self.options)

    async def claim(self, link: Link, request: ClaimRequest) -> Claim:
        """Publish the claim and read a refusal back; the caller has `judge`d it."""
        return await claim_one(link, self, request)

    async def claim_many(self, link: Link, requests: Sequence[ClaimRequest]) -> list[Claim]:
        return await claim_all(link, self, requests)

    async def history(self, link: Link, job: str, limit: int) -> list[RunRecord]:
        return await read_history(link, self, job, limit)

    async def jobs(self, link: Link) -> list[str]:
        return await read_jobs(link, self)
