"""`Fleet`: this instance's part in the fleet (DESIGN section 12), on stores with membership (M1).

A heartbeat task announces the instance every `refresh_ms` (live for `TTL_REFRESHES` refreshes)
and reads the member list in the same beat. For each (job, slot) the dispatcher asks `split`:
the jobs this instance contends for are claimed at the slot as always; the others wait their
grace, then are read (`check`, L10) and claimed only if still undecided (`dispatcher` does
that). The list only shapes load: an empty or unknown list, or one without this instance, makes
it contend for everything, as before the fleet existed."""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Sequence

import attrs

from .._claims import Claim, ClaimRequest
from .._errors import AnarchonError
from .._fleet import Member, rendezvous_score
from .._urls import redact
from ..abc import SupportsMembership
from .claimer import TRANSPORT_ERRORS
from .context import RuntimeContext
from .jobs import JobSpec
from .settings import Settings

__all__ = ["TTL_REFRESHES", "Fleet", "FleetCounters", "fleet_grace_ms", "make_fleet"]

log = logging.getLogger("anarchon.fleet")

TTL_REFRESHES = 3
"""A member stays live for this many refreshes after its last heartbeat: one lost heartbeat
does not drop it from the list."""


def fleet_grace_ms(grace_ms: int, spec: JobSpec) -> int:
    """How long a non-contender of `spec` waits after the slot: the fleet grace, but at most
    half the job's `max_late`, so that a slot whose contenders all died is still claimed on
    time (a claim past max_late would only record it late)."""
    return min(grace_ms, spec.max_late_ms // 2)


@attrs.define
class FleetCounters:
    """This instance's counts since it started, published as the heartbeat's `stats`."""

    claims: int = 0
    """(job, slot)s it claimed at the slot, as a contender (or with no usable member list)."""
    reads: int = 0
    """(job, slot)s it did not contend for and read after the grace (`check` or a claim)."""
    fallbacks: int = 0
    """Of those reads, the slots it found undecided and decided itself (won or recorded)."""
    wins: int = 0
    """Runs it won at their slot, as a contender or in a fallback."""

    def as_stats(self) -> dict[str, int]:
        return attrs.asdict(self)


class Fleet:
    """The heartbeat, the member list it reads, the contenders of each slot, the counters."""

    def __init__(
        self,
        context: RuntimeContext,
        store: SupportsMembership,
        *,
        contenders: int,
        refresh_ms: int,
        grace_ms: int,
    ) -> None:
        self.context = context
        self.store = store
        self.k = contenders
        self.refresh_ms = refresh_ms
        self.grace_ms = grace_ms
        self.counters = FleetCounters()
        self.members: tuple[Member, ...] = ()
        """The live members as last read (empty before the first read or after failures)."""
        self._names: frozenset[str] = frozenset()
        self._stop = asyncio.Event()
        self._problem: str | None = None

    @property
    def instance(self) -> str:
        return self.context.instance

    # -- roles -----------------------------------------------------------------------------------
    def contends(self, job: str, slot: int) -> bool:
        """Whether this instance claims (job, slot) at the slot: it is one of its contenders
        (`anarchon._fleet.contenders`), or the member list cannot say (empty, or without this
        instance). It stops at the k-th member ranked above it, so a large fleet costs a few
        hashes per job for most of its members, not one per member."""
        names, me = self._names, self.instance
        if me not in names:
            return True
        mine = rendezvous_score(me, job, slot)
        above = 0
        for name in names:
            if name == me:
                continue
            score = rendezvous_score(name, job, slot)
            if score > mine or (score == mine and name < me):
                above += 1
                if above >= self.k:
                    return False
        return True

    def split(self, specs: Sequence[JobSpec], slot: int) -> tuple[list[JobSpec], list[JobSpec]]:
        """The jobs of `slot` this instance claims now, and those it leaves to their
        contenders (to read after the grace). A job whose max_late leaves no room for a grace
        is always claimed now."""
        now: list[JobSpec] = []
        later: list[JobSpec] = []
        for spec in specs:
            if fleet_grace_ms(self.grace_ms, spec) <= 0 or self.contends(spec.name, slot):
                now.append(spec)
            else:
                later.append(spec)
        return now, later

    # -- counters ------------------------------------------------------------------------------
    def claimed(self, requests: Sequence[ClaimRequest], claims: Sequence[Claim]) -> None:
        """Count the claims sent at the slot and their wins."""
        self.counters.claims += len(requests)
        self.counters.wins += sum(1 for c in claims if c.won)
        for request, claim in zip(requests, claims, strict=True):
            self._tell(request, claim, "contender")

    def read(self, request: ClaimRequest, claim: Claim) -> None:
        """Count one non-contender's read after the grace, and whether it decided the slot."""
        self.counters.reads += 1
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
        """One heartbeat: announce (with the counters) and read the live members. A store error
        keeps the last list and is an outage like any other (logged once)."""
        timeout_s = max(self.refresh_ms / 1000, 1.0)
        try:
            ttl_ms = self.refresh_ms * TTL_REFRESHES
            stats = self.counters.as_stats()
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
        self._names = frozenset(m.instance for m in members)

    def forget(self, problem: str) -> None:
        """Drop the member list (this instance then claims every slot) and log why, once."""
        self.members, self._names = (), frozenset()
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
        self._stop = stop
        while not stop.is_set():
            await self.beat()
            try:
                await asyncio.wait_for(stop.wait(), self.refresh_ms / 1000)
            except asyncio.TimeoutError:
                pass

    async def leave(self) -> None:
        """Graceful stop: leave the list at once, so the others stop counting on this instance
        as a contender (best effort: otherwise its ttl runs out)."""
        self._names = frozenset()
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
        refresh_ms=settings.fleet_refresh_ms,
        grace_ms=settings.fleet_grace_ms,
    )
