"""What the no-lease strategies share: one claim stream per job (``{prefix:job}:claims``) whose
entries carry the fields ``slot``, ``token`` and ``holder``, the outcomes won / lost / late /
skipped, and `history` read from the stream. The store recognises its own claims everywhere (C2).

A request with a `skip_reason` (S1) takes the slot in the same create-if-absent step as a claim,
with an entry that also has the field ``skip`` (the reason): nobody can win the slot, the claim
answers `skipped`, and so does every later claim that reads the entry back; `history` shows it
``skipped`` with the reason as its error. The strategies never decide a skip themselves: the
scheduler does, and sends the reason (T4)."""

from __future__ import annotations

import abc
from typing import TYPE_CHECKING, Any
from urllib.parse import unquote

from anarchon.backend import (
    Capabilities,
    Claim,
    ClaimRequest,
    HistoryReader,
    Outcome,
    RunRecord,
    RunStatus,
    StoreCorrupt,
    early_claim_error,
)

from .._client import guarded, translated
from .scripted import ScriptedStrategy

if TYPE_CHECKING:
    from .._connection import Link

__all__ = [
    "Entry",
    "StreamStrategy",
    "answered",
    "decided",
    "parse_entry",
    "record_from_entry",
    "refuse_early",
    "skip_tail",
    "skipped",
]

Entry = tuple[str, dict[str, str]]


def parse_entry(entry: Any, key: str) -> tuple[str, int, str, str, str | None]:
    """(id, slot, token, holder, skip reason or None) of a claim entry; anything else is
    `StoreCorrupt`."""
    try:
        entry_id, fields = entry
        slot = int(fields["slot"])
        token = fields["token"]
        holder = fields.get("holder", "")
        skip = fields.get("skip")
    except (KeyError, TypeError, ValueError, AttributeError):
        raise StoreCorrupt(
            f"Redis stream {key} holds an entry that is not a claim ({entry!r}); anarchon writes "
            "fields slot, token and holder: remove the key or use another prefix"
        ) from None
    if not isinstance(token, str) or not isinstance(holder, str):
        raise StoreCorrupt(f"Redis stream {key} entry {entry_id} has no token text")
    if skip is not None and not isinstance(skip, str):
        raise StoreCorrupt(f"Redis stream {key} entry {entry_id} has a skip that is not text")
    return str(entry_id), slot, token, holder, skip


def record_from_entry(job: str, entry: Any, key: str) -> RunRecord:
    """A claim entry as history shows it: ``claimed`` (attempt 1), or ``skipped`` (attempt 0,
    finished when written, the reason as its error) for a skip's entry."""
    entry_id, slot, token, holder, skip = parse_entry(entry, key)
    written = int(entry_id.split("-")[0])
    if skip is None:
        return RunRecord(
            job=job,
            slot=slot,
            status=RunStatus.CLAIMED,
            attempt=1,
            token=token,
            holder=holder,
            claimed_at=written,
        )
    return RunRecord(
        job=job,
        slot=slot,
        status=RunStatus.SKIPPED,
        attempt=0,
        token=token,
        holder=holder,
        claimed_at=written,
        finished_at=written,
        error=skip,
    )


def skip_tail(request: ClaimRequest) -> str:
    """``<m> <skip_reason><instance>``, the end of each claim script request (``batch.lua``,
    ``reason_holder``): m is the reason's length in bytes, 0 without one."""
    reason = request.skip_reason
    if reason is None:
        return f"0 {request.instance}"
    return f"{len(reason.encode())} {reason}{request.instance}"


def decided(mine: bool, token: str, holder: str) -> Claim:
    if mine:
        return Claim(outcome=Outcome.WON, attempt=1, token=token, holder=holder)
    return Claim(outcome=Outcome.LOST, attempt=1, token=token, holder=holder)


def skipped(token: str, holder: str, reason: str) -> Claim:
    """S1: the slot's entry is a skip (attempt 0, as `anarchon.backend.skipped_claim`)."""
    return Claim(outcome=Outcome.SKIPPED, attempt=0, token=token, holder=holder, reason=reason)


def _unescaped(text: str) -> str:
    return unquote(text) if "%" in text else text


def answered(request: ClaimRequest, state: str, rest: str) -> Claim | None:
    """The `Claim` for a claim script's answer that every strategy gives (``batch.lua``):
    ``added`` (this request's entry took the slot), ``mine``, ``found <token> <holder>`` or
    ``skipped <token> <holder> <reason>``; None for any other state."""
    if state in ("added", "mine"):
        if state == "added" and request.skip_reason is not None:
            return skipped(request.token, request.instance, request.skip_reason)
        return decided(True, request.token, request.instance)
    if state == "found":
        token, _, holder = rest.partition(" ")
        return decided(False, token, _unescaped(holder))
    if state == "skipped":
        token, holder, reason = (*rest.split(" ", 2), "", "")[:3]
        return skipped(token, _unescaped(holder), _unescaped(reason))
    return None


def refuse_early(request: ClaimRequest, now: str, remembers_ms: int) -> None:
    """C5: raise the `ConfigError` for a claim the script refused as ``early`` at `now` (the
    server's clock as it answered)."""
    error = early_claim_error(request, int(now), remembers_ms)
    if error is None:  # the script and anarchon.backend disagree: a bug, never a win
        raise StoreCorrupt(
            f"Redis refused the claim of job {request.job!r} at slot {request.slot} as early at "
            f"{now}, which anarchon does not"
        )
    raise error


class StreamStrategy(ScriptedStrategy):
    """Base of the no-lease strategies."""

    run_key = "claims"

    @property
    @abc.abstractmethod
    def remembers_ms(self) -> int | None:
        """T3: how long a claim stays known after its slot."""

    batch = True
    """The strategy has a `claim_many` (`SupportsClaimMany`)."""
    pause = False
    """P1: the claim reads the job's pause in its atomic step. Only ``script`` can: the claim of
    stream-id and idmp is a bare ``XADD``, which reads nothing first."""
    trigger = False
    """X1: triggered slots are claimed and recorded as scheduled ones are. ``script`` (its scan
    finds a slot whatever order slots arrive in). Not stream-id: Redis refuses an entry ID below
    the stream's top, so an ad-hoc slot claimed after the next scheduled one would always be
    ``late``. Not offered by idmp for now, though ``XADD ... IDMP`` would take any slot."""

    @property
    def capabilities(self) -> Capabilities:
        return Capabilities(
            leases=False,
            self_recognition=True,
            fencing=False,
            overlap=False,
            history=True,
            store_clock=True,
            skips=True,
            batch=self.batch,
            pause=self.pause,
            trigger=self.trigger,
            remembers_ms=self.remembers_ms,
        )

    async def jobs(self, link: Link) -> list[str]:
        """The jobs whose claim stream has an entry: idmp gives a job's stream its settings
        before the first claim (`setup_jobs`), so a stream may be empty. One SCAN walk, then one
        pipelined XLEN per stream; a key that is not a stream is listed (its history says what
        is wrong with it)."""
        named = await super().jobs(link)
        if not named:
            return []
        pipe = link.client.pipeline(transaction=False)
        for job in named:
            pipe.xlen(self.keys(job).claims)
        with translated(link.url):
            sizes = await pipe.execute(raise_on_error=False)
        return [job for job, size in zip(named, sizes, strict=True) if size != 0]

    async def history(self, link: Link, job: str, limit: int = 100) -> list[RunRecord]:
        """The job's claims, newest first (entries are appended in slot order, near enough: the
        list is sorted by slot)."""
        keys = self.keys(job)
        client = link.client

        async def read() -> Any:
            return await client.xrevrange(keys.claims, count=max(limit, 1) * 2)

        entries = await guarded(client, link.url, keys, [keys.claims], read)
        runs: dict[int, RunRecord] = {}
        # An entry anarchon did not write is reported with the runs (`DamagedHistory`).
        reader = HistoryReader(job)
        for entry in entries:
            try:
                run = record_from_entry(job, entry, keys.claims)
            except StoreCorrupt as exc:
                entry_id = entry[0] if isinstance(entry, (list, tuple)) and entry else "?"
                reader.damage(f"{keys.claims} entry {entry_id}", str(exc))
                continue
            runs.setdefault(run.slot, run)
        return reader.result([runs[s] for s in sorted(runs, reverse=True)[: max(limit, 0)]])
