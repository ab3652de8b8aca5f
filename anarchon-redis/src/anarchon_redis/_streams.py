"""What the no-lease strategies share: one claim stream per job (``{prefix:job}:claims``) whose
entries carry the fields ``slot``, ``token`` and ``holder``, the outcomes won / lost / late, and
`history` read from the stream. The store recognises its own claims everywhere (C2)."""

from __future__ import annotations

import abc
from collections.abc import Sequence
from typing import Any

from anarchon import (
    Capabilities,
    Claim,
    ClaimRequest,
    Outcome,
    RunRecord,
    RunStatus,
    StoreCorrupt,
)

from ._client import guarded, reraising
from ._keys import JobKeys
from ._store import RedisStore

__all__ = ["Entry", "StreamStore", "parse_entry", "raise_first_error"]

Entry = tuple[str, dict[str, str]]


def parse_entry(entry: Any, key: str) -> tuple[str, int, str, str]:
    """(id, slot, token, holder) of a claim entry; anything else is `StoreCorrupt`."""
    try:
        entry_id, fields = entry
        slot = int(fields["slot"])
        token = fields["token"]
        holder = fields.get("holder", "")
    except (KeyError, TypeError, ValueError, AttributeError):
        raise StoreCorrupt(
            f"Redis stream {key} holds an entry that is not a claim ({entry!r}); anarchon writes "
            "fields slot, token and holder: remove the key or use another prefix"
        ) from None
    if not isinstance(token, str) or not isinstance(holder, str):
        raise StoreCorrupt(f"Redis stream {key} entry {entry_id} has no token text")
    return str(entry_id), slot, token, holder


def decided(mine: bool, token: str, holder: str) -> Claim:
    if mine:
        return Claim(outcome=Outcome.WON, attempt=1, token=token, holder=holder)
    return Claim(outcome=Outcome.LOST, attempt=1, token=token, holder=holder)


async def raise_first_error(
    store: StreamStore, requests: Sequence[ClaimRequest], replies: Sequence[Any]
) -> None:
    """After a pipeline: the first error among `replies` (one per request, in order), raised as
    the claim alone would raise it (a WRONGTYPE names the key)."""
    for request, reply in zip(requests, replies, strict=True):
        if isinstance(reply, Exception):
            await store._guarded(store.keys(request.job), reraising(reply))


class StreamStore(RedisStore):
    """Base of the no-lease strategies."""

    @property
    @abc.abstractmethod
    def remembers_ms(self) -> int | None:
        """T3: how long a claim stays known after its slot."""

    batch = False
    """The strategy has a pipelined `claim_many` (`SupportsClaimMany`)."""

    @property
    def capabilities(self) -> Capabilities:
        return Capabilities(
            leases=False,
            self_recognition=True,
            fencing=False,
            overlap=False,
            history=True,
            store_clock=True,
            batch=self.batch,
            remembers_ms=self.remembers_ms,
        )

    async def _guarded(self, keys: JobKeys, call: Any) -> Any:
        return await guarded(self.client, self.url, keys, [keys.claims], call)

    async def history(self, job: str, limit: int = 100) -> list[RunRecord]:
        """The job's claims, newest first (entries are appended in slot order, near enough: the
        list is sorted by slot)."""
        keys = self.keys(job)
        client = self.client

        async def read() -> Any:
            return await client.xrevrange(keys.claims, count=max(limit, 1) * 2)

        entries = await self._guarded(keys, read)
        runs: dict[int, RunRecord] = {}
        for entry in entries:
            entry_id, slot, token, holder = parse_entry(entry, keys.claims)
            if slot in runs:
                continue
            runs[slot] = RunRecord(
                job=job,
                slot=slot,
                status=RunStatus.CLAIMED,
                attempt=1,
                token=token,
                holder=holder,
                claimed_at=int(entry_id.split("-")[0]),
            )
        return [runs[s] for s in sorted(runs, reverse=True)[: max(limit, 0)]]
