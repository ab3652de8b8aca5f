"""The member list of `memory://` (rule M1), kept per prefix in the store's shared namespace.

The store calls it under the namespace's lock with the store's clock read once (T1)."""

from __future__ import annotations

from collections.abc import Mapping

import attrs

from .._fleet import Member
from .._members import check_announce, joined_at

__all__ = ["MemberTable"]


@attrs.define
class MemberTable:
    """(prefix, instance): the members, live or whose ttl ran out (forgotten when listed)."""

    rows: dict[tuple[str, str], Member] = attrs.Factory(dict)

    def announce(
        self, prefix: str, instance: str, ttl_ms: int, stats: Mapping[str, int] | None, now: int
    ) -> Member:
        """M1: live until ``now + ttl_ms``; `started_ms` kept from the first heartbeat since
        the member joined (or since its ttl ran out); `stats` replaced."""
        instance, ttl_ms, counters = check_announce(instance, ttl_ms, stats)
        known = self.rows.get((prefix, instance))
        started = joined_at(
            None if known is None else known.started_ms,
            None if known is None else known.until_ms,
            now,
        )
        member = Member(
            instance=instance,
            seen_ms=now,
            until_ms=now + ttl_ms,
            started_ms=started,
            stats=counters,
        )
        self.rows[(prefix, instance)] = member
        return member

    def live(self, prefix: str, now: int) -> list[Member]:
        """M1: the live members of `prefix`, by instance; the expired ones are forgotten."""
        for key in [k for k, m in self.rows.items() if m.until_ms < now]:
            del self.rows[key]
        return sorted(
            (m for (p, _), m in self.rows.items() if p == prefix), key=lambda m: m.instance
        )

    def leave(self, prefix: str, instance: str, now: int) -> bool:
        """M1: remove `instance` now; False if it was not a live member."""
        member = self.rows.pop((prefix, instance), None)
        return member is not None and member.until_ms >= now

    def has(self, prefix: str) -> bool:
        """Whether any member (even expired) was announced under `prefix`."""
        return any(p == prefix for p, _ in self.rows)
