"""`Fleet`: this instance's part in the fleet (DESIGN section 12), on stores with membership (M1).

A heartbeat task announces the instance every `refresh_ms` (live for `TTL_REFRESHES` refreshes),
with the fingerprint of its jobs, and reads the member list in the same beat. For each (job,
slot) the dispatcher asks `plan`: the jobs this instance contends for are claimed at the slot as
always; those it watches are claimed after the grace (the claim reads first: a decided slot costs
a read); the rest are silent, and claimed only if `orphans` finds that every contender and
watcher left the list (or restarted) within the watch window. The list only shapes load: an
empty or unknown list, or one without this instance, makes it contend for everything, as before
the fleet existed."""

from __future__ import annotations

import asyncio
import enum
import logging
from collections.abc import Iterable, Mapping, Sequence

import attrs

from .._claims import Claim, ClaimRequest
from .._errors import AnarchonError
from .._fleet import JOB_SET_STAT, Member, all_departed, job_set_fingerprint, rank_above
from .._urls import redact
from ..abc import SupportsMembership
from .claimer import TRANSPORT_ERRORS
from .context import RuntimeContext
from .jobs import JobSpec
from .settings import Settings

__all__ = [
    "TTL_REFRESHES",
    "WATCH_REFRESHES",
    "Fleet",
    "FleetCounters",
    "Role",
    "SlotPlan",
    "fleet_grace_ms",
    "job_signature",
    "make_fleet",
]

log = logging.getLogger("anarchon.fleet")

TTL_REFRESHES = 3
"""A member stays live for this many refreshes after its last heartbeat: one lost heartbeat
does not drop it from the list."""
WATCH_REFRESHES = 2
"""A silent instance watches a slot for its contenders and watchers to leave until the longest
ttl among its peers has run out after the slot, plus this many of its own refreshes (to read the
list once more after that)."""


def fleet_grace_ms(grace_ms: int, spec: JobSpec) -> int:
    """How long a watcher of `spec` waits after the slot: the fleet grace, but at most half
    the job's `max_late`, so that a slot whose contenders all died is still claimed on time (a
    claim past max_late would only record it late)."""
    return min(grace_ms, spec.max_late_ms // 2)


def job_signature(spec: JobSpec) -> str:
    """What instances must agree on to share a job's slots: its name and schedule."""
    schedule = spec.schedule.describe() if spec.schedule is not None else "-"
    return f"{spec.name}\x00{schedule}"


class Role(enum.Enum):
    """What this instance does with one (job, slot)."""

    CONTEND = "contend"
    """Claim it at the slot (one of the first k)."""
    WATCH = "watch"
    """Claim it after the grace (one of the next w): decided by then, the claim only reads."""
    SILENT = "silent"
    """Claim it only if every contender and watcher leaves the list within the watch window."""


@attrs.frozen
class SlotPlan:
    """The roles of one slot's jobs, and the peers they were computed over (for `orphans`)."""

    now: list[JobSpec]
    watch: list[JobSpec]
    silent: list[JobSpec]
    peers: Mapping[str, int]
    """The peers (instance -> when it joined) as listed at the slot."""
    watch_ms: int = 0
    """How long after the slot the silent jobs are watched: the longest ttl among the peers
    (a killed one is listed that long) plus `WATCH_REFRESHES` refreshes."""


@attrs.define
class FleetCounters:
    """This instance's counts since it started, published as the heartbeat's `stats`."""

    claims: int = 0
    """(job, slot)s it claimed at the slot, as a contender (or with no usable member list)."""
    reads: int = 0
    """(job, slot)s it did not contend for and claimed later: as a watcher after the grace, or
    silent after its contenders and watchers left (the claim reads first)."""
    fallbacks: int = 0
    """Of those reads, the slots it found undecided and decided itself (won or recorded)."""
    orphans: int = 0
    """Of those reads, the ones made because every contender and watcher of the slot left."""
    wins: int = 0
    """Runs it won at their slot, as a contender or in a fallback."""

    def as_stats(self) -> dict[str, int]:
        return attrs.asdict(self)


class Fleet:
    """The heartbeat, the member list it reads, the roles of each slot, the counters."""

    def __init__(
        self,
        context: RuntimeContext,
        store: SupportsMembership,
        *,
        contenders: int,
        watchers: int,
        refresh_ms: int,
        grace_ms: int,
    ) -> None:
        self.context = context
        self.store = store
        self.k = contenders
        self.w = watchers
        self.refresh_ms = refresh_ms
        self.grace_ms = grace_ms
        self.counters = FleetCounters()
        self.job_set = job_set_fingerprint(())
        """The fingerprint of this instance's jobs (`set_jobs`), published in each heartbeat."""
        self.members: tuple[Member, ...] = ()
        """The live members as last read (empty before the first read or after failures)."""
        self._peers: dict[str, int] = {}
        self._ttl_ms = 0
        """The longest ttl among the peers as last read."""
        # Swapped for a new one at each heartbeat that read the list: `next_beat` waits on it.
        self._beaten = asyncio.Event()
        self._problem: str | None = None

    @property
    def instance(self) -> str:
        return self.context.instance

    def set_jobs(self, specs: Iterable[JobSpec]) -> None:
        """Publish the fingerprint of these jobs from the next heartbeat on."""
        self.job_set = job_set_fingerprint(job_signature(spec) for spec in specs)

    # -- roles -----------------------------------------------------------------------------------
    def role(self, job: str, slot: int) -> Role:
        """This instance's role for (job, slot) by its rank among the peers (the listed
        members with its job set): the first k contend, the next w watch. Without a usable list
        (empty, or without this instance) it contends for everything."""
        peers, me = self._peers, self.instance
        if me not in peers:
            return Role.CONTEND
        above = rank_above(peers, me, job, slot, self.k + self.w)
        if above < self.k:
            return Role.CONTEND
        return Role.WATCH if above < self.k + self.w else Role.SILENT

    def plan(self, specs: Sequence[JobSpec], slot: int) -> SlotPlan:
        """The roles of `slot`'s jobs. A job whose max_late leaves no room for a grace is
        always claimed now."""
        plan = SlotPlan(
            [], [], [], dict(self._peers), self._ttl_ms + WATCH_REFRESHES * self.refresh_ms
        )
        by_role = {Role.CONTEND: plan.now, Role.WATCH: plan.watch, Role.SILENT: plan.silent}
        for spec in specs:
            if fleet_grace_ms(self.grace_ms, spec) <= 0:
                plan.now.append(spec)
            else:
                by_role[self.role(spec.name, slot)].append(spec)
        return plan

    def orphans(self, plan: SlotPlan, specs: Sequence[JobSpec], slot: int) -> list[JobSpec]:
        """The silent jobs of `plan` whose every contender and watcher (by the list at the
        slot) has left the list since, or joined again (a restart lost what it was doing). All
        of them when the list is no longer known."""
        if not self._peers:
            return list(specs)
        departed = {n for n, joined in plan.peers.items() if self._peers.get(n) != joined}
        live = [n for n in plan.peers if n not in departed]
        top = self.k + self.w
        return [s for s in specs if all_departed(live, departed, s.name, slot, top)]

    async def next_beat(self, timeout_s: float) -> None:
        """Wait for the next heartbeat that reads the list, or `timeout_s`."""
        try:
            await asyncio.wait_for(self._beaten.wait(), max(timeout_s, 0))
        except asyncio.TimeoutError:
            pass

    # -- counters ------------------------------------------------------------------------------
    def claimed(self, requests: Sequence[ClaimRequest], claims: Sequence[Claim]) -> None:
        """Count the claims sent at the slot and their wins."""
        self.counters.claims += len(requests)
        self.counters.wins += sum(1 for c in claims if c.won)
        for request, claim in zip(requests, claims, strict=True):
            self._tell(request, claim, "contender")

    def read(self, request: ClaimRequest, claim: Claim, *, orphan: bool = False) -> None:
        """Count one later claim (a watcher's, or a silent one's for an orphan), and whether
        it decided the slot."""
        self.counters.reads += 1
        self.counters.orphans += orphan
        mine = claim.won or (claim.skip_kind is not None and claim.token == request.token)
        if mine:
            self.counters.fallbacks += 1
        if claim.won:
            self.counters.wins += 1
        self._tell(request, claim, "fallback" if mine else "silent")

    def _tell(self, request: ClaimRequest, claim: Claim, role: str) -> None:
        self.context.events.fleet_slot(
            store=self.context.store_name,
            instance=self.instance,
            job=request.job,
            slot=request.slot,
            role=role,
            won=claim.won,
        )

    # -- heartbeat -------------------------------------------------------------------------------
    async def beat(self) -> None:
        """One heartbeat: announce (with the counters and the job set) and read the live
        members. A store error keeps the last list and is an outage like any other (logged
        once)."""
        timeout_s = max(self.refresh_ms / 1000, 1.0)
        try:
            ttl_ms = self.refresh_ms * TTL_REFRESHES
            stats = {**self.counters.as_stats(), JOB_SET_STAT: self.job_set}
            await asyncio.wait_for(self.store.announce(self.instance, ttl_ms, stats), timeout_s)
            members = await asyncio.wait_for(self.store.members(), timeout_s)
        except TRANSPORT_ERRORS as exc:
            self.context.health.failed("announce", exc)
            return
        except AnarchonError as exc:
            # A member list the store cannot give (damaged, refused): contend for every slot,
            # as without a fleet, until it can again; said once per distinct error.
            self.forget(f"{type(exc).__name__}: {redact(str(exc))}")
            return
        self.context.health.ok()
        self._problem = None
        self.members = tuple(members)
        peers = [m for m in members if m.stats.get(JOB_SET_STAT) == self.job_set]
        self._peers = {m.instance: m.started_ms for m in peers}
        self._ttl_ms = max((m.until_ms - m.seen_ms for m in peers), default=0)
        self._wake()

    def _wake(self) -> None:
        beaten, self._beaten = self._beaten, asyncio.Event()
        beaten.set()

    def forget(self, problem: str) -> None:
        """Drop the member list (this instance then claims every slot) and log why, once."""
        self.members, self._peers = (), {}
        self._wake()
        if problem != self._problem:
            log.warning(
                "the fleet's member list cannot be read or written (%s); this instance claims "
                "every slot until it can",
                problem,
                extra={"instance": self.instance},
            )
        self._problem = problem

    async def run(self, stop: asyncio.Event) -> None:
        """Beat every `refresh_ms` until `stop` is set."""
        while not stop.is_set():
            await self.beat()
            try:
                await asyncio.wait_for(stop.wait(), self.refresh_ms / 1000)
            except asyncio.TimeoutError:
                pass

    async def leave(self) -> None:
        """Graceful stop: leave the list at once, so the others stop counting on this instance
        (best effort: otherwise its ttl runs out)."""
        self._peers = {}
        try:
            await asyncio.wait_for(self.store.leave(self.instance), 2.0)
        except (*TRANSPORT_ERRORS, AnarchonError) as exc:
            log.debug("leaving the fleet failed (its ttl will run out): %s", redact(str(exc)))


def make_fleet(context: RuntimeContext, settings: Settings) -> Fleet | None:
    """The fleet of a scheduler on `context.store`: None when the store keeps no member list
    or `settings.contenders` is 0 (every instance claims every slot)."""
    store = context.store
    if settings.contenders < 1 or not store.capabilities.membership:
        return None
    if not isinstance(store, SupportsMembership):
        return None
    return Fleet(
        context,
        store,
        contenders=settings.contenders,
        watchers=settings.fleet_watchers,
        refresh_ms=settings.fleet_refresh_ms,
        grace_ms=settings.fleet_grace_ms,
    )
