"""The failover harness's moving parts: a `Topology` to break, a `Profile` of how hard, the run
(`run_chaos`) and the count (`tally`). See the package's docstring for how a run goes."""

from __future__ import annotations

import asyncio
import json
import statistics
import sys
import tempfile
import time
from collections import defaultdict
from collections.abc import Iterable, Mapping, Sequence
from pathlib import Path
from subprocess import PIPE, Popen
from typing import Any, Protocol

import attrs

from anarchon import ClaimRequest, Outcome, Overlap, create_store

from .worker import claim_until_decided, lane_job

__all__ = ["Fault", "Profile", "Tally", "Topology", "run_chaos", "tally", "worker_spec"]

ROOT = Path(__file__).resolve().parents[2]

REQUEST: Mapping[str, Any] = {
    "lease_ms": 3_600_000,
    "max_late_ms": 10 * 365 * 86_400_000,
    "attempts": 1,
    "overlap": Overlap.ALLOW.value,
}
"""The claims' fields: a lease that outlives the run, one attempt, overlap allowed and never late,
so that nothing but the store's own memory can decide a slot twice."""


class Topology(Protocol):
    """Servers to break. `start` brings them up (free 127.0.0.1 ports, temp dirs); `url` and
    `options` are what the workers pass to `anarchon.create_store`; `fault` breaks something
    (kill the primary, restart a node, cut a link) and returns once the fault is injected and the
    repair under way, saying what it did; `stop` stops every server, also after a failure.

    Optional attributes, read with getattr: `server` (the servers' version, for the tally) and
    `injected_ms` (the wall-clock ms at which the last `fault` broke something, when it first
    waited for a healthy state: recovery is measured from then, not from the call)."""

    name: str
    option: str

    def start(self) -> None: ...

    @property
    def url(self) -> str: ...

    @property
    def options(self) -> Mapping[str, Any]: ...

    def fault(self, round: int) -> str: ...

    def stop(self) -> None: ...


@attrs.frozen(kw_only=True)
class Profile:
    """How hard a run pushes: `processes` x `tasks` claimants per slot race on ascending slots,
    a fault every `fault_every_s`, until at least `faults` faults and `claims` answers (or
    `max_slots` slots each). `jobs` above 1 runs that many such races at once, each on its own
    job (every slot of each contested by the same `processes` x `tasks` claimants): a store
    whose claims of one job take turns (PostgreSQL's job lock, held through a synchronous
    commit) then makes `jobs` times the claims in the same time."""

    name: str
    processes: int
    tasks: int
    faults: int
    claims: int
    fault_every_s: float
    jobs: int = 1
    max_slots: int = 1_000_000
    give_up_ms: int = 20_000
    recover_timeout_s: float = 60.0


PROFILES = {
    "short": Profile(name="short", processes=3, tasks=2, faults=3, claims=600, fault_every_s=0.3),
    "long": Profile(
        name="long", processes=4, tasks=5, faults=20, claims=100_000, fault_every_s=2.0
    ),
}
"""``short`` runs in CI (seconds); ``long`` makes 10^5 contested claims (``nox -s chaos``)."""


@attrs.frozen(kw_only=True)
class Fault:
    """One injected fault: when it began (wall-clock ms), what it was, and when a probe claim was
    decided again (None: not within the profile's `recover_timeout_s`)."""

    began_ms: int
    what: str
    probe_decided_ms: int | None


@attrs.frozen(kw_only=True)
class Tally:
    """What happened to every slot of a run (the JSON the harness writes)."""

    topology: str
    option: str
    profile: str
    processes: int
    tasks: int
    jobs: int
    """Races run at once, each on its own job (slots below count each job's slot once)."""
    claims: int
    """Answers recorded (contested claims: every slot has processes x tasks claimants)."""
    slots: int
    """Slots (of any job) claimed by every claimant."""
    duplicate_winners: int
    """Winners beyond the first, summed over slots (C1 broken when > 0)."""
    duplicate_slots: int
    nobody_won: int
    """Slots every claimant answered for, with no winner among them."""
    unknown: int
    """Claims still ``unknown`` (or failing) after `Profile.give_up_ms` of resends."""
    forgotten: int
    """Decided slots a fresh claim won again after the run: the store forgot them."""
    forgotten_unchecked: int
    """Decided slots that check got no definite answer for (or did not reach in its time)."""
    outcomes: Mapping[str, int]
    faults: Sequence[str]
    recover_ms: Sequence[int]
    """Per fault: from its start to the first ``won`` answered after it."""
    seconds: float
    command: str
    server: str | None = None
    """The servers' version, where the topology says (its ``server`` attribute)."""
    stopped_early: bool = False
    """Fewer claims or faults than the profile asks: the run's time limit (``--max-minutes``)
    ended it, or the workers reached their last slot."""

    def as_json(self) -> dict[str, Any]:
        data = attrs.asdict(self)
        data["recover_ms_median"] = statistics.median(self.recover_ms) if self.recover_ms else None
        data["recover_ms_max"] = max(self.recover_ms) if self.recover_ms else None
        return data


def worker_spec(
    topology: Topology, profile: Profile, out: Path, job: str, first_slot: int
) -> dict[str, Any]:
    return {
        "url": topology.url,
        "options": dict(topology.options),
        "job": job,
        "first_slot": first_slot,
        "step_ms": 1_000,
        "slots": profile.max_slots,
        "tasks": profile.tasks,
        "jobs": profile.jobs,
        "request": dict(REQUEST),
        "give_up_ms": profile.give_up_ms,
        "out": str(out),
    }


def run_chaos(
    topology: Topology, profile: Profile, command: str = "", max_seconds: float | None = None
) -> Tally:
    """Start `topology`, race `profile` on it while injecting faults (no new fault and the
    workers told to stop once `max_seconds` have passed), stop it, count."""
    topology.start()
    try:
        return _run(topology, profile, command, max_seconds)
    finally:
        topology.stop()


def _run(topology: Topology, profile: Profile, command: str, max_seconds: float | None) -> Tally:
    started = time.monotonic()
    job = f"chaos-{int(time.time())}"
    first_slot = (int(time.time()) - 86_400) * 1000
    with tempfile.TemporaryDirectory(prefix="anarchon-chaos-") as folder:
        outs = [Path(folder) / f"worker-{n}.jsonl" for n in range(profile.processes)]
        # Each worker's stderr goes to a file, not a pipe: nobody reads a pipe during the race,
        # and a worker whose pool logs a warning per connection lost in each failover filled its
        # 64 KiB and stopped, blocked in the write (PostgreSQL with --jobs 16).
        errs = [out.with_suffix(".err") for out in outs]
        procs = []
        for out, err in zip(outs, errs, strict=True):
            spec = worker_spec(topology, profile, out, job, first_slot)
            with err.open("w") as stderr:
                procs.append(
                    Popen(
                        [sys.executable, "-m", "bench.chaos.worker", json.dumps(spec)],
                        cwd=ROOT,
                        stdin=PIPE,
                        stdout=PIPE,
                        stderr=stderr,
                        text=True,
                    )
                )
        try:
            for proc, err in zip(procs, errs, strict=True):
                assert proc.stdout is not None and proc.stdin is not None
                line = proc.stdout.readline()
                if line.strip() != "ready":
                    proc.communicate()
                    raise RuntimeError(f"chaos worker did not start: {err.read_text()[-2000:]}")
            for proc in procs:
                assert proc.stdin is not None
                proc.stdin.write("go\n")
                proc.stdin.flush()
            until = None if max_seconds is None else started + max_seconds
            faults = _inject_faults(topology, profile, procs, outs, until)
            for proc in procs:
                assert proc.stdin is not None
                if proc.poll() is None:
                    proc.stdin.write("stop\n")
                    proc.stdin.flush()
            for proc, err in zip(procs, errs, strict=True):
                proc.communicate(timeout=profile.recover_timeout_s * 2)
                if proc.returncode != 0:
                    raise RuntimeError(f"chaos worker failed: {err.read_text()[-2000:]}")
        finally:
            for proc in procs:
                if proc.poll() is None:
                    proc.kill()
                    proc.wait()
        answers = [json.loads(line) for out in outs for line in out.read_text().splitlines()]
    claimants = profile.processes * profile.tasks
    decided = _decided_slots(answers, claimants)
    forgotten, unchecked = asyncio.run(_forgotten(topology, job, profile.jobs, decided))
    return tally(
        topology=topology,
        profile=profile,
        answers=answers,
        faults=faults,
        forgotten=forgotten,
        forgotten_unchecked=unchecked,
        seconds=time.monotonic() - started,
        command=command,
        server=getattr(topology, "server", None),
        stopped_early=len(faults) < profile.faults or len(answers) < profile.claims,
    )


def _inject_faults(
    topology: Topology,
    profile: Profile,
    procs: Sequence[Popen[str]],
    outs: Sequence[Path],
    until: float | None = None,
) -> list[Fault]:
    """A fault every `fault_every_s` until the profile's faults and claims are reached, the
    workers are done, or the monotonic clock passes `until`; each waits for a probe claim to be
    decided again before the next pause."""
    faults: list[Fault] = []
    while True:
        pause_until = time.monotonic() + profile.fault_every_s
        while time.monotonic() < pause_until:
            if all(proc.poll() is not None for proc in procs):
                return faults
            time.sleep(0.05)
        if len(faults) >= profile.faults and _answers(outs) >= profile.claims:
            return faults
        if until is not None and time.monotonic() >= until:
            return faults
        began_ms = int(time.time() * 1000)
        what = topology.fault(len(faults))
        # A topology that first waits for a healthy state says when it broke something.
        began_ms = getattr(topology, "injected_ms", None) or began_ms
        decided_ms = asyncio.run(_probe(topology, profile, len(faults)))
        faults.append(Fault(began_ms=began_ms, what=what, probe_decided_ms=decided_ms))


def _answers(outs: Sequence[Path]) -> int:
    """Answers written so far (lines in the workers' files)."""
    total = 0
    for out in outs:
        if out.exists():
            with out.open("rb") as lines:
                total += sum(chunk.count(b"\n") for chunk in iter(lambda: lines.read(1 << 16), b""))
    return total


async def _probe(topology: Topology, profile: Profile, round: int) -> int | None:
    """The wall-clock ms at which a fresh claim on the repaired store got a definite answer."""
    deadline = time.monotonic() + profile.recover_timeout_s
    while time.monotonic() < deadline:
        store = create_store(topology.url, **topology.options)
        try:
            await store.open()
            request = ClaimRequest(
                job="chaos-probe", slot=round * 1000, instance="probe", **REQUEST
            )
            outcome, _, answered_ms = await claim_until_decided(store, request, 2_000)
            if outcome != Outcome.UNKNOWN.value:
                return answered_ms
        except Exception:  # noqa: BLE001 (any failure while the topology heals: try again)
            await asyncio.sleep(0.1)
        finally:
            await store.close()
    return None


def _key(answer: Sequence[Any]) -> tuple[int, int]:
    """(lane, slot) of an answer line (lines without a lane: lane 0)."""
    return (answer[5] if len(answer) > 5 else 0), answer[0]


def _decided_slots(answers: Iterable[Sequence[Any]], claimants: int) -> list[tuple[int, int]]:
    """The (lane, slot) pairs every claimant answered for, with at least one winner."""
    count: dict[tuple[int, int], int] = defaultdict(int)
    won: set[tuple[int, int]] = set()
    for answer in answers:
        count[_key(answer)] += 1
        if answer[2] == Outcome.WON.value:
            won.add(_key(answer))
    return sorted(key for key, n in count.items() if n == claimants and key in won)


async def _forgotten(
    topology: Topology,
    job: str,
    jobs: int,
    slots: Sequence[tuple[int, int]],
    budget_s: float = 600,
) -> tuple[int, int]:
    """How many of `slots` ((lane, slot): the slot of lane's job) a fresh claim wins again now
    (the store forgot their runs), and how many could not be checked: no definite answer, or
    `budget_s` spent (a stalled store)."""
    store = create_store(topology.url, **topology.options)
    await store.open()
    until = time.monotonic() + budget_s
    try:
        forgotten = unchecked = 0
        for lane, slot in slots:
            if time.monotonic() >= until:
                unchecked += 1
                continue
            request = ClaimRequest(
                job=lane_job(job, jobs, lane), slot=slot, instance="chaos-check", **REQUEST
            )
            outcome, _, _ = await claim_until_decided(store, request, 20_000)
            forgotten += outcome == Outcome.WON.value
            unchecked += outcome == Outcome.UNKNOWN.value
        return forgotten, unchecked
    finally:
        await store.close()


def tally(
    *,
    topology: Topology,
    profile: Profile,
    answers: Sequence[Sequence[Any]],
    faults: Sequence[Fault],
    forgotten: int,
    seconds: float,
    command: str,
    forgotten_unchecked: int = 0,
    server: str | None = None,
    stopped_early: bool = False,
) -> Tally:
    """Count `answers` (``[slot, token, outcome, tries, answered_ms, lane]``) per slot of each
    lane's job."""
    claimants = profile.processes * profile.tasks
    per_slot: dict[tuple[int, int], list[str]] = defaultdict(list)
    outcomes: dict[str, int] = defaultdict(int)
    won_at: list[int] = []
    for answer in answers:
        outcome, answered_ms = answer[2], answer[4]
        per_slot[_key(answer)].append(outcome)
        outcomes[outcome] += 1
        if outcome == Outcome.WON.value:
            won_at.append(answered_ms)
    won_at.sort()
    complete = [o for o in per_slot.values() if len(o) == claimants]
    winners = [o.count(Outcome.WON.value) for o in per_slot.values()]
    recover_ms = []
    for fault in faults:
        after = [at for at in won_at if at > fault.began_ms]
        if after:
            recover_ms.append(after[0] - fault.began_ms)
    return Tally(
        topology=topology.name,
        option=topology.option,
        profile=profile.name,
        processes=profile.processes,
        tasks=profile.tasks,
        jobs=profile.jobs,
        claims=len(answers),
        slots=len(complete),
        duplicate_winners=sum(max(n - 1, 0) for n in winners),
        duplicate_slots=sum(n > 1 for n in winners),
        nobody_won=sum(Outcome.WON.value not in o for o in complete),
        unknown=outcomes.get(Outcome.UNKNOWN.value, 0),
        forgotten=forgotten,
        forgotten_unchecked=forgotten_unchecked,
        outcomes=dict(sorted(outcomes.items())),
        faults=[fault.what for fault in faults],
        recover_ms=recover_ms,
        seconds=round(seconds, 1),
        command=command,
        server=server,
        stopped_early=stopped_early,
    )
