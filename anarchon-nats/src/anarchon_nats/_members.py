"""The fleet's member list on NATS (rule M1, `anarchon.abc.SupportsMembership`).

NATS has no clock a client can read (T4), so a member's instants are its writer's clock, as M1
allows for such stores. The members live in a stream of their own, ``<stream>_MEMBERS`` (the
claims' stream is never changed: its settings are checked on every open), one subject per
member, ``_anarchon_members.<prefix>.<32 hex of the instance id's SHA-256>`` (no prefix starts
with ``_``, so these never overlap a claims stream's subjects), at most one message each
(``max_msgs_per_subject=1``); the stream's ``max_age`` (`MAX_MEMBER_TTL_MS`, a day) drops what a
dead member left, and a member's own ``until`` in its message ends it before that.

* `announce` publishes the member with ``Nats-Expected-Last-Subject-Sequence`` set to the
  sequence this store object last wrote for it: one round trip while nobody else writes the
  member. Otherwise (the first announce of this object, or another wrote it meanwhile) the
  member's last message is read first, to keep its ``started`` while it is live (M1).
* `members` reads the stream's info with a subject filter (one request: which members have a
  message), then the last message of each, many at once: reads a user allowed only
  ``STREAM.INFO`` and ``STREAM.MSG.GET`` on the stream may make (R1). Where the stream does not
  exist (nobody announced yet), there is no member.
* `leave` reads the member and purges its subject.

A message that is not a member anarchon wrote is `StoreCorrupt` naming its subject.
"""

from __future__ import annotations

import asyncio
import hashlib
import json
import time
from collections.abc import Mapping
from typing import Any

import attrs
from nats.js.api import DiscardPolicy, RetentionPolicy, StorageType, StreamConfig
from nats.js.errors import APIError, NotFoundError

from anarchon import Member, StoreCorrupt
from anarchon.backend import (
    MAX_MEMBER_TTL_MS,
    check_announce,
    check_instance,
    joined_at,
    read_member,
    shown,
    stats_text,
)

from ._connection import Link
from ._history import Stored, _get, read_subjects

__all__ = ["MemberList"]

ERR_WRONG_LAST_SEQUENCE = 10071
ERR_STREAM_NAME_IN_USE = 10058
ANNOUNCE_TRIES = 5
"""Sends of an announce that keeps meeting another writer of the same member."""
READS_AT_ONCE = 32


def _now_ms() -> int:
    return time.time_ns() // 1_000_000


@attrs.define
class MemberList:
    """M1 for one `NATSStore`: its members' stream and what it last wrote for each member."""

    prefix: str
    stream: str
    """The claims' stream; the members' is ``<stream>_MEMBERS``."""
    written: dict[str, tuple[int, int, int]] = attrs.Factory(dict)
    """instance -> (sequence, started, until) of this object's last announce of it."""

    @property
    def name(self) -> str:
        return f"{self.stream}_MEMBERS"

    @property
    def pattern(self) -> str:
        return f"_anarchon_members.{self.prefix}.*"

    def subject(self, instance: str) -> str:
        digest = hashlib.sha256(instance.encode()).hexdigest()[:32]
        return f"_anarchon_members.{self.prefix}.{digest}"

    def link(self, link: Link) -> Link:
        return attrs.evolve(link, stream=self.name)

    async def setup(self, link: Link) -> None:
        """Create the members' stream if it does not exist (safe when many open at once)."""
        try:
            await link.js.stream_info(self.name)
            return
        except NotFoundError:
            pass
        config = StreamConfig(
            name=self.name,
            subjects=[self.pattern],
            retention=RetentionPolicy.LIMITS,
            storage=StorageType.FILE,
            discard=DiscardPolicy.OLD,
            max_msgs_per_subject=1,
            max_age=MAX_MEMBER_TTL_MS / 1000,
        )
        try:
            await link.js.add_stream(config)
        except APIError as exc:
            if exc.err_code != ERR_STREAM_NAME_IN_USE:
                raise

    async def announce(
        self, link: Link, instance: str, ttl_ms: int, stats: Mapping[str, int] | None
    ) -> Member:
        instance, ttl_ms, counters = check_announce(instance, ttl_ms, stats)
        subject = self.subject(instance)
        known = self.written.get(instance)
        for _ in range(ANNOUNCE_TRIES):
            if known is None:
                last = await self._last(self.link(link), subject)
                known = (0, 0, -1) if last is None else (last[0].seq, *_ends(last[1]))
            seq, old_started, old_until = known
            now = _now_ms()
            member = Member(
                instance=instance,
                started_ms=joined_at(old_started, old_until, now) if seq else now,
                seen_ms=now,
                until_ms=now + ttl_ms,
                stats=counters,
            )
            body = json.dumps(
                {
                    "instance": instance,
                    "started": member.started_ms,
                    "seen": now,
                    "until": member.until_ms,
                    "stats": stats_text(counters),
                },
                separators=(",", ":"),
            ).encode()
            headers = {"Nats-Expected-Last-Subject-Sequence": str(seq)}
            try:
                ack = await link.js.publish(
                    subject, body, timeout=link.timeout, stream=self.name, headers=headers
                )
            except APIError as exc:
                if exc.err_code != ERR_WRONG_LAST_SEQUENCE:
                    raise
                known = None  # another writer of this member: read it again
                continue
            self.written[instance] = (ack.seq, member.started_ms, member.until_ms)
            return member
        raise StoreCorrupt(
            f"NATS at {link.where}: member {shown(instance)} was written by another writer "
            f"{ANNOUNCE_TRIES} times while it announced: two instances share this instance id; "
            "give each its own"
        )

    async def members(self, link: Link) -> list[Member]:
        members = self.link(link)
        try:
            subjects = await read_subjects(members, self.pattern)
        except NotFoundError:
            return []  # nobody announced yet: the stream does not exist
        gate = asyncio.Semaphore(READS_AT_ONCE)

        async def read(subject: str) -> tuple[Stored, Member] | None:
            async with gate:
                return await self._last(members, subject)

        found = await asyncio.gather(*(read(s) for s in subjects.counts))
        now = _now_ms()
        live = [m for _, m in filter(None, found) if m.until_ms >= now]
        return sorted(live, key=lambda m: m.instance)

    async def leave(self, link: Link, instance: str) -> bool:
        check_instance(instance)
        subject = self.subject(instance)
        members = self.link(link)
        self.written.pop(instance, None)
        try:
            last = await self._last(members, subject)
        except NotFoundError:
            return False
        if last is None:
            return False
        await link.js.purge_stream(self.name, subject=subject)
        return last[1].until_ms >= _now_ms()

    async def _last(self, link: Link, subject: str) -> tuple[Stored, Member] | None:
        stored = await _get(link, {"last_by_subj": subject})
        if stored is None:
            return None
        return stored, _member(stored, f"subject {subject} of stream {self.name}")


def _ends(member: Member) -> tuple[int, int]:
    return member.started_ms, member.until_ms


def _member(stored: Stored, where: str) -> Member:
    """A stored message as a `Member`; `StoreCorrupt` naming `where` if it is not one."""
    try:
        data: Any = json.loads(stored.body)
    except ValueError:
        data = None
    if not isinstance(data, dict):
        raise StoreCorrupt(
            f"member at {where} holds {shown(stored.body)}, not the JSON object anarchon writes; "
            "purge the subject, the member announces itself again"
        )
    return read_member(
        data.get("instance"),
        data.get("started"),
        data.get("seen"),
        data.get("until"),
        data.get("stats"),
        where,
    )
