"""What the no-lease strategies share: one claim stream per job (``{prefix:job}:claims``) whose
entries carry the fields ``slot``, ``token`` and ``holder``, the outcomes won / lost / late, and
`history` read from the stream. The store recognises its own claims everywhere (C2)."""

from __future__ import annotations

import abc
from typing import Any
from urllib.parse import unquote

from anarchon import (
    Capabilities,
    Claim,
    Outcome,
    RunRecord,
    RunStatus,
    StoreCorrupt,
)

from ._client import guarded
from ._keys import JobKeys
from ._store import RedisStore

__all__ = ["Entry", "StreamStore", "decided", "found", "parse_entry"]

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


def found(rest: str) -> Claim:
    """`lost`, from the ``<token> <holder>`` that ends a claim script's answer ``found``
    (another token holds the slot; ``batch.lua`` escapes the holder)."""
    token, _, holder = rest.partition(" ")
    return decided(False, token, unquote(holder) if "%" in holder else holder)


class StreamStore(RedisStore):
    """Base of the no-lease strategies."""

    @property
    @abc.abstractmethod
    def remembers_ms(self) -> int | None:
        """T3: how long a claim stays known after its slot."""

    batch = True
    """The strategy has a `claim_many` (`SupportsClaimMany`)."""

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
