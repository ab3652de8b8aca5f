"""The fleet's member list on PostgreSQL (rule M1, `anarchon.abc.SupportsMembership`): the
statements, one round trip each, and `Membership`, the store's calls (`PostgresStore` inherits
them).

One row per instance in ``<table>_members``, keyed (prefix, instance), created with the control
tables. `announce` is one ``INSERT ... ON CONFLICT DO UPDATE`` on the server's clock
(``clock_timestamp()``, T1, or the test clock): the row's ``started_ms`` is kept while it is
live, and the same statement deletes up to 100 members of the prefix whose ttl ran out, skipping
rows another announce has locked (``SKIP LOCKED``: sweeps never wait, so they cannot deadlock).
`members` is one ``SELECT``: it works on a store opened read-only, for a user with ``SELECT``
rights only (R1); a schema from before members has no table, and no member.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Mapping
from typing import Any

import attrs
from psycopg import sql

from anarchon import ConfigError, Member
from anarchon.backend import check_announce, check_instance, read_member, stats_text

from ._names import Names
from ._options import PostgresOptions

__all__ = ["MemberStatements", "Membership"]

_NOW = "coalesce(%(clock)s::bigint, floor(extract(epoch FROM clock_timestamp()) * 1000)::bigint)"
SWEEP_MAX_ROWS = 100
"""Members whose ttl ran out that one announce deletes at most."""


@attrs.frozen
class MemberStatements:
    """The statements of M1 for one store's tables (named parameters; ``clock`` is the test
    clock or None)."""

    announce: sql.Composed
    members: sql.Composed
    leave: sql.Composed
    exists: sql.Composable

    @classmethod
    def build(cls, names: Names) -> MemberStatements:
        members = names.members
        return cls(
            announce=sql.SQL(
                "WITH n AS (SELECT " + _NOW + " AS now), "
                "gone AS (DELETE FROM {members} g WHERE (g.prefix, g.instance) IN ("
                "SELECT e.prefix, e.instance FROM {members} e, n WHERE e.prefix = %(prefix)s "
                "AND e.until_ms < n.now AND e.instance <> %(instance)s "
                "LIMIT " + str(SWEEP_MAX_ROWS) + " FOR UPDATE OF e SKIP LOCKED)) "
                "INSERT INTO {members} AS m "
                "(prefix, instance, started_ms, seen_ms, until_ms, stats) "
                "SELECT %(prefix)s, %(instance)s, n.now, n.now, n.now + %(ttl)s, %(stats)s FROM n "
                "ON CONFLICT (prefix, instance) DO UPDATE SET started_ms = CASE "
                "WHEN m.until_ms >= excluded.seen_ms AND m.started_ms <= excluded.seen_ms "
                "THEN m.started_ms ELSE excluded.started_ms END, "
                "seen_ms = excluded.seen_ms, until_ms = excluded.until_ms, stats = excluded.stats "
                "RETURNING m.started_ms, m.seen_ms, m.until_ms"
            ).format(members=members),
            members=sql.SQL(
                "SELECT instance, started_ms, seen_ms, until_ms, stats FROM {} "
                "WHERE prefix = %(prefix)s AND until_ms >= "
                + _NOW
                + ' ORDER BY instance COLLATE "C"'
            ).format(members),
            leave=sql.SQL(
                "DELETE FROM {} WHERE prefix = %(prefix)s AND instance = %(instance)s "
                "RETURNING until_ms >= " + _NOW
            ).format(members),
            exists=sql.SQL("SELECT to_regclass(%(members)s) IS NOT NULL"),
        )


class Membership:
    """`SupportsMembership` for `PostgresStore` (which sets these attributes)."""

    names: Names
    options: PostgresOptions
    where: str
    _read_only: bool
    _members: MemberStatements
    _members_table: bool
    _fetchone: Callable[..., Awaitable[tuple[Any, ...]]]
    _fetchall: Callable[..., Awaitable[list[tuple[Any, ...]]]]

    def _now_param(self) -> int | None:
        raise NotImplementedError

    def _member_params(self, instance: str = "", **more: object) -> dict[str, object]:
        return {
            "prefix": self.options.prefix,
            "instance": instance,
            "clock": self._now_param(),
            **more,
        }

    def _writes_members(self, what: str) -> None:
        if self._read_only:
            raise ConfigError(
                f"PostgreSQL store {self.where} was opened read-only (open_read_only): it reads "
                f"the member list, and cannot {what}; open it with 'await anarchon.connect(url)'"
            )

    async def announce(
        self, instance: str, ttl_ms: int, stats: Mapping[str, int] | None = None
    ) -> Member:
        """M1: write or refresh `instance`, live for `ttl_ms` by the server's clock; one
        statement."""
        instance, ttl_ms, counters = check_announce(instance, ttl_ms, stats)
        self._writes_members("announce a member")
        params = self._member_params(instance, ttl=ttl_ms, stats=stats_text(counters))
        started, seen, until = await self._fetchone(self._members.announce, params)
        return Member(
            instance=instance, started_ms=started, seen_ms=seen, until_ms=until, stats=counters
        )

    async def members(self) -> list[Member]:
        """M1: the live members by the server's clock, sorted by instance; one SELECT (R1)."""
        if not self._members_table:
            found = await self._fetchone(
                self._members.exists, {"members": self.names.members.as_string(None)}
            )
            self._members_table = bool(found[0])
            if not self._members_table:
                return []  # a schema from before members, opened read-only
        rows = await self._fetchall(self._members.members, self._member_params())
        table = self.names.shown(self.names.members_table)
        return [
            read_member(
                row[0],
                row[1],
                row[2],
                row[3],
                row[4],
                where=f"table {table} (prefix {self.options.prefix!r}, instance {row[0]!r})",
            )
            for row in rows
        ]

    async def leave(self, instance: str) -> bool:
        """M1: remove `instance` now; False if it was not a live member."""
        check_instance(instance)
        self._writes_members("remove a member")
        rows = await self._fetchall(self._members.leave, self._member_params(instance))
        return any(bool(row[0]) for row in rows)
