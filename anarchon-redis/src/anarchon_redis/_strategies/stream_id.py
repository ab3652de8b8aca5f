"""``strategy=stream-id``: ``XADD {prefix:job}:claims <slot>-0``, a plain command, no script.

Redis refuses an entry ID at or below the stream's top item. The refusal does not say whose the
slot is, so the claim reads the slot's entry back with ``XRANGE <slot>-0 <slot>-0``: my token is
`won` (a resent claim, C2), another token `lost`, no entry `late` (a newer slot was claimed first,
or the entry was trimmed). The XRANGE is written together with the XADD, so every claim is one
round trip: a loss, which is what every instance but one gets, costs about what a win costs,
and a win reads back its own entry, which it does not look at (``docs/backends/redis.md``
measures both ways). Old slots can never be won again, trimmed or not: the stream's top ID is
the floor.

A skip (S1) is the same XADD with the field ``skip`` (the reason): `skipped` for the writer and
for every claim that reads the entry back. Early claims (C5) need no check here: the store
remembers a claim by its slot (the entry ID), not for a time from when it is written; an entry
trimmed or not, no claim of a slot at or below the stream's top is ever added again.

`claim_many` is the one place with a script (``_scripts/stream_id.lua``): the same XADD, and the
same read-back of a refused one, for up to `BATCH` jobs per call, so a batch of many jobs costs
one round trip and its answers are those of claiming one by one.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

import redis.exceptions as rex

from anarchon.backend import Claim, ClaimRequest, Outcome, StoreCorrupt

from .. import _wire as wire
from .._client import Script
from .._wire import bulk
from .streams import StreamStrategy, answered, decided, parse_entry, skip_tail, skipped

if TYPE_CHECKING:
    from .._connection import Link
    from .._options import RedisOptions

__all__ = ["STREAM_ID", "StreamIdStrategy"]

REFUSED = "equal or smaller than the target stream top item"
STREAM_ID = Script("stream_id.lua", claims=True)


class StreamIdStrategy(StreamStrategy):
    """No-lease: the slot is the stream entry ID."""

    name = "stream-id"

    def __init__(self, options: RedisOptions) -> None:
        super().__init__(options)
        maxlen = self.options.stream_maxlen
        self._trim = f"$6\r\nMAXLEN\r\n$1\r\n=\r\n{bulk(str(maxlen))}"
        self._option = bulk(f"claim {maxlen}")

    @property
    def remembers_ms(self) -> int | None:
        return None

    async def setup(self, link: Link) -> None:
        await STREAM_ID.load(link.client)

    def _ask(self, request: ClaimRequest) -> str:
        return f"{request.slot} {request.token} {skip_tail(request)}"

    def _xadd(self, request: ClaimRequest) -> bytes:
        """``XADD <claims> MAXLEN = <maxlen> <slot>-0 slot <slot> token <token> holder <me>``,
        and ``skip <reason>`` for a skip."""
        slot = str(request.slot)
        reason = request.skip_reason
        skip = "" if reason is None else f"$4\r\nskip\r\n{bulk(reason)}"
        return (
            f"*{12 if reason is None else 14}\r\n$4\r\nXADD\r\n{self._wire_keys(request.job)}"
            f"{self._trim}{bulk(slot + '-0')}"
            f"$4\r\nslot\r\n{bulk(slot)}$5\r\ntoken\r\n{bulk(request.token)}"
            f"$6\r\nholder\r\n{bulk(request.instance)}{skip}"
        ).encode()

    def _xrange(self, request: ClaimRequest) -> bytes:
        """``XRANGE <claims> <slot>-0 <slot>-0``: the slot's entry, whoever added it."""
        entry_id = bulk(f"{request.slot}-0")
        return f"*4\r\n$6\r\nXRANGE\r\n{self._wire_keys(request.job)}{entry_id}{entry_id}".encode()

    async def claim(self, link: Link, request: ClaimRequest) -> Claim:
        if request.slot <= 0:
            return _slot_zero()
        confirm = link.confirm
        packed = self._xadd(request) + self._xrange(request)
        if confirm is not None:
            packed += confirm.packed(self.keys(request.job).ack)
        count = 2 + (confirm.count if confirm is not None else 0)

        async def send(pool: wire.Pool) -> list[Any]:
            replies = await wire.call_many(pool, packed, count)
            if isinstance(replies[0], rex.MovedError):  # not added: `routed` sends it again
                raise replies[0]
            return replies

        shortfall = None
        try:
            added, entries, *tail = await link.routed(self.keys(request.job).tag, send)
            if confirm is not None:
                shortfall = confirm.shortfall(link.url, tail)
        except (rex.RedisError, rex.RedisClusterException, OSError) as exc:
            await self._refuse(link, request.job, exc)
        if confirm is not None:
            return confirm.claim(await self._answer(link, request, added, entries), shortfall)
        return await self._answer(link, request, added, entries)

    async def _answer(self, link: Link, request: ClaimRequest, added: Any, entries: Any) -> Claim:
        """The claim from the replies of its XADD and XRANGE."""
        if not isinstance(added, Exception):
            if request.skip_reason is not None:
                return skipped(request.token, request.instance, request.skip_reason)
            return decided(True, request.token, request.instance)
        if REFUSED not in str(added):
            await self._refuse(link, request.job, added)
        if isinstance(entries, Exception):
            await self._refuse(link, request.job, entries)
        if not entries:
            return _late(request)
        written = _token_holder(entries[0])
        if written is None:  # not as this store writes it: read it field by field, or name the key
            _, _, token, holder, skip = parse_entry(
                _entry(entries[0]), self.keys(request.job).claims
            )
        else:
            (token, holder), skip = written, None
        if skip is not None:
            return skipped(token, holder, skip)
        return decided(token == request.token, token, holder)

    async def claim_many(self, link: Link, requests: Sequence[ClaimRequest]) -> list[Claim]:
        """The same XADDs and read-backs as `claim`, made by one script for up to `BATCH` jobs
        per call (see the module's doc), in request order."""
        batch = [r for r in requests if r.slot > 0]
        if not batch:
            return [_slot_zero() for _ in requests]
        claims = iter(await self._decided(link, STREAM_ID, self._option, batch, self._decide))
        return [next(claims) if r.slot > 0 else _slot_zero() for r in requests]

    def _decide(self, request: ClaimRequest, answer: str) -> Claim:
        """The batch script's answer ``<state>[ <token> <holder>...]`` as a `Claim`."""
        state, _, rest = answer.partition(" ")
        claim = answered(request, state, rest)
        if claim is not None:
            return claim
        if state == "late":
            return _late(request)
        raise StoreCorrupt(f"Redis answered {answer!r} to the claim script for job {request.job!r}")


def _token_holder(raw: Any) -> tuple[str, str] | None:
    """(token, holder) of a claim's entry as ``XADD`` here writes it (fields slot, token, holder,
    in that order), without building its dict; None for any other shape (a skip's entry too)."""
    try:
        _, flat = raw
        if len(flat) == 6 and flat[2] == "token" and flat[4] == "holder" and flat[0] == "slot":
            token, holder = flat[3], flat[5]
            if isinstance(token, str) and isinstance(holder, str):
                return token, holder
    except (TypeError, ValueError, KeyError):
        pass
    return None


def _entry(raw: Any) -> Any:
    """A stream entry as redis-py's ``xrange`` gives it: (id, {field: value})."""
    try:
        entry_id, flat = raw
        return entry_id, dict(zip(flat[::2], flat[1::2], strict=True))
    except (TypeError, ValueError):
        return raw  # parse_entry names the key


def _late(request: ClaimRequest) -> Claim:
    return Claim(
        outcome=Outcome.LATE,
        reason=(
            f"late: a newer slot of job {request.job!r} was claimed first, or this slot's "
            "entry was trimmed; stream-id never claims a slot below the stream's top"
        ),
    )


def _slot_zero() -> Claim:
    return Claim(outcome=Outcome.LATE, reason="slot 0 cannot be a stream entry ID")
