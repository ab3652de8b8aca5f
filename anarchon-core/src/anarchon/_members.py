"""What every store that keeps the fleet's member list (rule M1, `anarchon.abc.SupportsMembership`)
shares: the checks of an announce, the stats as stored text, and reading a member back.

A store writes a member as its instance id, three instants (``started_ms``, ``seen_ms``,
``until_ms``) and its stats as compact JSON (`stats_text`); it reads it back with `read_member`,
which turns anything anarchon never writes into `StoreCorrupt` naming where it was found, so a
damaged member list is an error the operator can act on, never a crash and never code run from
the store (JSON only: nothing is unpickled or evaluated).
"""

from __future__ import annotations

import json
from collections.abc import Mapping

from ._errors import ConfigError, StoreCorrupt
from ._fleet import Member
from ._names import check_instance, check_name, shown

__all__ = [
    "MAX_MEMBER_TTL_MS",
    "MAX_STATS",
    "MAX_STATS_TEXT",
    "MIN_MEMBER_TTL_MS",
    "check_announce",
    "joined_at",
    "read_member",
    "read_stats",
    "stats_text",
]

MIN_MEMBER_TTL_MS = 100
"""The shortest ttl of an announce: a member that must heartbeat more often than ten times a
second costs the store more than the claims it saves."""
MAX_MEMBER_TTL_MS = 86_400_000
"""The longest ttl of an announce (a day): a dead member then keeps its share of contended
slots, which its fellows claim only after their grace, for at most that long."""
MAX_STATS = 32
"""Counters one member may publish."""
MAX_STATS_TEXT = 2_048
"""Characters the stats of one member take as stored JSON, at most (32 counters with names of
up to 40 characters and 19-digit values fit)."""
_MAX_STAT_NAME = 40
_INT64 = 2**63


def check_ttl(ttl_ms: object) -> int:
    """`ttl_ms` if it is an int of milliseconds in the allowed range, else `ConfigError`."""
    if isinstance(ttl_ms, bool) or not isinstance(ttl_ms, int):
        raise ConfigError(
            f"member ttl_ms must be an int of milliseconds, got {shown(ttl_ms)}: announce with "
            "ttl_ms=15_000, say (a few heartbeats)"
        )
    if not MIN_MEMBER_TTL_MS <= ttl_ms <= MAX_MEMBER_TTL_MS:
        raise ConfigError(
            f"member ttl_ms {ttl_ms} is out of range: use {MIN_MEMBER_TTL_MS} ms to "
            f"{MAX_MEMBER_TTL_MS} ms (a day), a few heartbeat periods"
        )
    return ttl_ms


def check_stats(stats: object) -> dict[str, int]:
    """`stats` as a plain dict of counters (None is no counter), or `ConfigError` naming what is
    wrong: at most `MAX_STATS` names like job names (up to 40 characters), int values that fit
    in 64 bits."""
    if stats is None:
        return {}
    if not isinstance(stats, Mapping):
        raise ConfigError(
            f"member stats must be a mapping of counter names to ints, got {shown(stats)}"
        )
    if len(stats) > MAX_STATS:
        raise ConfigError(
            f"member stats hold {len(stats)} counters, at most {MAX_STATS}: publish only the "
            "counters the fleet reads (claims, wins, fallbacks ...)"
        )
    checked: dict[str, int] = {}
    for name, value in stats.items():
        check_name(name, what="member stats name")
        if len(name) > _MAX_STAT_NAME:
            raise ConfigError(
                f"member stats name {shown(name)} is {len(name)} characters long, at most "
                f"{_MAX_STAT_NAME}"
            )
        if isinstance(value, bool) or not isinstance(value, int):
            raise ConfigError(
                f"member stats value of {name!r} must be an int, got {shown(value)}: stats are "
                "counters"
            )
        if not -_INT64 <= value < _INT64:
            raise ConfigError(
                f"member stats value of {name!r} is {shown(value)}, which does not fit in 64 "
                "bits (stores keep it as a signed 64-bit integer)"
            )
        checked[name] = value
    return checked


def check_announce(
    instance: object, ttl_ms: object, stats: object
) -> tuple[str, int, dict[str, int]]:
    """The arguments of `announce`, checked: `ConfigError` naming the one that is wrong."""
    return check_instance(instance), check_ttl(ttl_ms), check_stats(stats)


def stats_text(stats: Mapping[str, int]) -> str:
    """The stats as the compact JSON object stores keep (names sorted)."""
    return json.dumps(dict(stats), sort_keys=True, separators=(",", ":"))


def read_stats(text: object, where: str) -> dict[str, int]:
    """Stats stored as `stats_text` wrote them; anything else is `StoreCorrupt` naming `where`
    (the key, row or message it was read from)."""
    problem = ""
    if isinstance(text, bytes):
        try:
            text = text.decode()
        except UnicodeDecodeError:
            problem = "bytes that are not UTF-8"
    if not problem and (not isinstance(text, str) or len(text) > MAX_STATS_TEXT):
        problem = f"no JSON text of at most {MAX_STATS_TEXT} characters"
    value: object = None
    if not problem:
        try:
            value = json.loads(text)  # type: ignore[arg-type]
        except ValueError:
            problem = "text that is not JSON"
    if not problem:
        try:
            return check_stats(value)
        except ConfigError as exc:
            problem = f"JSON that is not an object of counters ({exc})"
    raise StoreCorrupt(
        f"member stats at {where} hold {problem}: {shown(text)}; anarchon writes a JSON object "
        "of int counters there. Delete the member (it announces itself again)"
    )


def read_member(
    instance: object,
    started_ms: object,
    seen_ms: object,
    until_ms: object,
    stats: object,
    where: str,
) -> Member:
    """A member as a store holds it; `StoreCorrupt` naming `where` if any field is not what
    anarchon writes (an instance id, three epoch-ms ints in order, stats JSON)."""
    instants = (started_ms, seen_ms, until_ms)
    try:
        name = check_instance(instance)
    except ConfigError:
        name = ""
    if (
        not name
        or not all(isinstance(v, int) and not isinstance(v, bool) for v in instants)
        or not started_ms <= seen_ms <= until_ms  # type: ignore[operator]
    ):
        raise StoreCorrupt(
            f"member at {where} holds values anarchon never writes (instance "
            f"{shown(instance)}, started {shown(started_ms)}, seen {shown(seen_ms)}, until "
            f"{shown(until_ms)}); delete the member (it announces itself again)"
        )
    return Member(
        instance=name,
        started_ms=started_ms,  # type: ignore[arg-type]
        seen_ms=seen_ms,  # type: ignore[arg-type]
        until_ms=until_ms,  # type: ignore[arg-type]
        stats=read_stats(stats, where),
    )


def joined_at(old_started: int | None, old_until: int | None, now: int) -> int:
    """M1's ``started_ms`` of an announce at `now`: the member's first heartbeat if it is still
    live (its old ``until_ms >= now``), else now (it joins again)."""
    if old_started is not None and old_until is not None and old_until >= now:
        return min(old_started, now)
    return now
