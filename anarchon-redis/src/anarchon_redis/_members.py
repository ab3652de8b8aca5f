"""The fleet's member list (rule M1, `anarchon.abc.SupportsMembership`) for every strategy: the
members of a prefix need no claim script, so stream-id and idmp keep them as lease and script do.

Two keys with the prefix's own hash tag ``{prefix:}`` (Redis Cluster safe; the documented ACL
key pattern ``~{prefix:*`` covers them): the hash ``{prefix:}:members``, instance -> ``<started>
<seen> <until> <stats>`` (epoch ms by Redis TIME, the stats as compact JSON), and the sorted set
``{prefix:}:member-ends``, instance scored by its until, so an announce finds the members that
ended without reading them all. `announce` and `leave` are one script call each
(``_scripts/members.lua``); `members` is one pipelined round trip of plain reads (TIME,
HGETALL; two calls to the list's node on a cluster, whose pipelines refuse TIME), so it works on
a store opened read-only and for the monitoring ACL user (R1).
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from typing import TYPE_CHECKING, Any, cast

from anarchon.backend import (
    Member,
    StoreCorrupt,
    StoreUnavailable,
    check_announce,
    check_instance,
    read_member,
    stats_text,
)

from ._client import Script, translated
from ._keys import PrefixKeys

if TYPE_CHECKING:
    import redis.asyncio as aioredis

    from ._connection import Link
    from ._options import RedisOptions

__all__ = ["MEMBERS", "Membership"]

MEMBERS = Script("members.lua")


class Membership:
    """`announce`, `members` and `leave` of every Redis store (a base of `RedisStore`)."""

    link: Link
    options: RedisOptions

    if TYPE_CHECKING:

        def _refused(self) -> RuntimeError: ...

    def _client(self) -> aioredis.Redis:
        """The client, or `StoreUnavailable` on a store that is not open (a scheduler that
        stops before its store ever came up still leaves the fleet without a crash)."""
        try:
            return self.link.client
        except RuntimeError as exc:
            raise StoreUnavailable(str(exc)) from None

    def _member_keys(self) -> list[str]:
        keys = PrefixKeys(self.options.prefix)
        return [keys.members, keys.member_ends]

    async def announce(
        self, instance: str, ttl_ms: int, stats: Mapping[str, int] | None = None
    ) -> Member:
        """M1: write or refresh `instance`, live for `ttl_ms` by Redis TIME; one script call."""
        instance, ttl_ms, counters = check_announce(instance, ttl_ms, stats)
        if self.link.read_only:
            raise self._refused()
        text = stats_text(counters)
        with self._members_keys():
            reply: Any = await MEMBERS(
                self._client(), self._member_keys(), ["announce", instance, ttl_ms, text]
            )
        started, seen, until = (int(part) for part in str(reply).split(" "))
        return Member(
            instance=instance, started_ms=started, seen_ms=seen, until_ms=until, stats=counters
        )

    async def members(self) -> list[Member]:
        """M1: the live members by Redis TIME, sorted by instance: TIME and HGETALL in one
        pipelined round trip. Reads only (R1)."""
        key = PrefixKeys(self.options.prefix).members
        client = self._client()
        with self._members_keys():
            cluster = self.link.cluster
            if cluster is not None:
                # A cluster pipeline refuses TIME (it has no key): the clock of the node that
                # holds the list, then the list.
                node = cluster.get_node_from_key(key)
                seconds, micros = await cluster.time(target_nodes=node)
                found = cast("dict[str, str]", await cluster.hgetall(key))
            else:
                pipe = client.pipeline(transaction=False)
                pipe.time()
                pipe.hgetall(key)
                (seconds, micros), found = await pipe.execute()
        now = int(seconds) * 1000 + int(micros) // 1000
        live = [_member(instance, value, key) for instance, value in found.items()]
        return sorted((m for m in live if m.until_ms >= now), key=lambda m: m.instance)

    async def leave(self, instance: str) -> bool:
        """M1: remove `instance` now; False if it was not a live member."""
        check_instance(instance)
        if self.link.read_only:
            raise self._refused()
        with self._members_keys():
            reply: Any = await MEMBERS(self._client(), self._member_keys(), ["leave", instance])
        return bool(reply == 1)

    @contextmanager
    def _members_keys(self) -> Iterator[None]:
        """`translated`, with a WRONGTYPE on the member keys naming them."""
        keys = PrefixKeys(self.options.prefix)
        try:
            with translated(self.link.url):
                yield
        except StoreCorrupt as exc:
            if "WRONGTYPE" not in str(exc):
                raise
            raise StoreCorrupt(
                f"Redis at {self.link.url}: key {keys.members} (anarchon keeps a hash there) or "
                f"{keys.member_ends} (a sorted set) holds another type: another program uses "
                "it; remove it or use another prefix"
            ) from None


def _member(instance: str, value: str, key: str) -> Member:
    """A field of the members hash as a `Member`; `StoreCorrupt` naming the key and field."""
    where = f"Redis key {key} field {instance!r}"
    parts = value.split(" ", 3)
    if len(parts) != 4 or not all(p.isdigit() for p in parts[:3]):
        raise StoreCorrupt(
            f"member at {where} holds {value[:80]!r}, not what anarchon writes (<started> <seen> "
            "<until> <stats JSON>); delete the field (HDEL), the member announces itself again"
        )
    started, seen, until = (int(p) for p in parts[:3])
    return read_member(instance, started, seen, until, parts[3], where)
