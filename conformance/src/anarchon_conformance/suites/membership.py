"""M1, membership: `announce(instance, ttl_ms, stats)` writes or refreshes one member in one
round trip, live until ``now + ttl_ms`` by the store's clock (T1), its first heartbeat kept as
``started_ms`` while it stays live and its stats replaced; `members()` returns every live member
(``until_ms >= now``) in one call, sorted by instance, also on a store opened read-only (R1);
`leave` removes one at once. The list only shapes load (DESIGN section 12), so these checks look
at the list alone.

Only for stores whose `capabilities.membership` is on (`anarchon.abc.SupportsMembership`)."""

from __future__ import annotations

import asyncio
import random

import pytest

from anarchon import ClaimStore, ConfigError, Member, SupportsMembership

from .._harness import BackendHarness
from .._rules import rule
from ._base import HarnessSuite, require, within
from .pause import wait_past
from .read_only import require_read_only

__all__ = ["MembershipTests", "membership"]

TTL_MS = 60_000
SHORT_TTL_MS = 600
"""The ttl of the member the expiry check lets run out: long enough that the check's next call
surely finds it live on a loaded machine, short enough to wait for."""
FLEET = 200
"""How many members the check of a large fleet announces (each announce one call, the list one
call)."""
CLOCK_SLACK_MS = 5
"""How far the kit lets a member's instants stray from the store's clock read around the call."""


def membership(harness: BackendHarness, store: ClaimStore) -> SupportsMembership:
    """`store` as a `SupportsMembership`, or skip (not applicable) when
    `capabilities.membership` is off."""
    require(harness, "membership")
    assert isinstance(store, SupportsMembership), (
        f"M1: capabilities.membership is on but {type(store).__name__} does not implement "
        "SupportsMembership (announce, members, leave)"
    )
    return store


def _names(members: list[Member]) -> list[str]:
    return [m.instance for m in members]


class MembershipTests(HarnessSuite):
    """M1 on stores with `capabilities.membership`; not applicable elsewhere."""

    @rule("M1")
    @pytest.mark.asyncio
    async def test_M1_announce_returns_the_member(self, harness: BackendHarness) -> None:
        store = await self.open(harness)
        fleet = membership(harness, store)
        before = await self.now(store)
        member = await within(fleet.announce("web-1:4242:ab12", TTL_MS, {"claims": 3, "wins": 1}))
        after = await self.now(store)
        assert member.instance == "web-1:4242:ab12", f"M1: announce returns its member: {member}"
        assert before - CLOCK_SLACK_MS <= member.seen_ms <= after + CLOCK_SLACK_MS, (
            f"M1: a heartbeat is written at the store's now ({before}..{after}), got {member}"
        )
        assert member.until_ms == member.seen_ms + TTL_MS, (
            f"M1: a member is live until seen_ms + ttl_ms ({TTL_MS}), got {member}"
        )
        assert member.started_ms == member.seen_ms, (
            f"M1: the first heartbeat of a member is its start, got {member}"
        )
        assert dict(member.stats) == {"claims": 3, "wins": 1}, (
            f"M1: announce returns the stats it stored, got {member}"
        )
        listed = await within(fleet.members())
        assert listed == [member], (
            f"M1: members() lists the member as announce returned it: {[member]}, got {listed}"
        )

    @rule("M1")
    @pytest.mark.asyncio
    async def test_M1_a_refresh_keeps_started_and_replaces_stats(
        self, harness: BackendHarness
    ) -> None:
        store = await self.open(harness)
        other = await self.open(harness)
        first = await within(membership(harness, store).announce("w:1", TTL_MS, {"a": 1, "b": 2}))
        await wait_past(store, first.seen_ms)
        # Another instance of the store object (a reconnect) refreshes the same member.
        again = await within(membership(harness, other).announce("w:1", TTL_MS * 2, {"a": 5}))
        assert again.started_ms == first.started_ms, (
            f"M1: a refresh of a live member keeps its first heartbeat as started_ms "
            f"({first.started_ms}), got {again}"
        )
        assert again.seen_ms > first.seen_ms and again.until_ms == again.seen_ms + TTL_MS * 2, (
            f"M1: a refresh moves seen_ms to now and until_ms to now + its ttl, after {first} "
            f"got {again}"
        )
        assert dict(again.stats) == {"a": 5}, (
            f"M1: a refresh replaces the stats (none kept from the last heartbeat), got {again}"
        )
        assert await within(membership(harness, store).members()) == [again], (
            "M1: members() shows the refreshed member once"
        )

    @rule("M1")
    @pytest.mark.asyncio
    async def test_M1_a_member_expires_after_its_ttl(self, harness: BackendHarness) -> None:
        """By the store's clock: the member is listed until its until_ms, not after; when it
        announces again it joins anew (a new started_ms)."""
        store = await self.open(harness)
        fleet = membership(harness, store)
        stays = await within(fleet.announce("stays:1", TTL_MS))
        short = await within(fleet.announce("short:1", SHORT_TTL_MS, {"n": 1}))
        listed = await within(fleet.members())
        assert _names(listed) == ["short:1", "stays:1"], (
            f"M1: both members are live right after they announced, got {listed}"
        )
        await wait_past(store, short.until_ms)
        for asking in (store, await self.open(harness)):
            listed = await within(membership(harness, asking).members())
            assert listed == [stays], (
                f"M1: a member whose ttl ran out by the store's clock (until {short.until_ms}) "
                f"is not listed; expected {[stays]}, got {listed}"
            )
        back = await within(fleet.announce("short:1", SHORT_TTL_MS))
        assert back.started_ms == back.seen_ms > short.started_ms, (
            f"M1: a member that announces after its ttl ran out joins again (started_ms = its "
            f"new heartbeat), after {short} got {back}"
        )

    @rule("M1")
    @pytest.mark.asyncio
    async def test_M1_leave_removes_a_member_at_once(self, harness: BackendHarness) -> None:
        store = await self.open(harness)
        fleet = membership(harness, store)
        one = await within(fleet.announce("one:1", TTL_MS))
        await within(fleet.announce("two:2", TTL_MS))
        assert await within(membership(harness, await self.open(harness)).leave("two:2")), (
            "M1: leave of a live member answers True (from any instance)"
        )
        assert await within(fleet.members()) == [one], "M1: a member that left is not listed"
        assert not await within(fleet.leave("two:2")), "M1: leave twice: False the second time"
        assert not await within(fleet.leave("never:3")), "M1: leave of a stranger: False"
        again = await within(fleet.announce("two:2", TTL_MS))
        assert again.started_ms == again.seen_ms, (
            f"M1: a member that left and announces again joins anew, got {again}"
        )

    @rule("M1")
    @pytest.mark.asyncio
    async def test_M1_members_are_sorted_by_instance(self, harness: BackendHarness) -> None:
        """Instance ids are free printable text: colons, dots, spaces, other scripts."""
        store = await self.open(harness)
        fleet = membership(harness, store)
        names = [
            "web-10:77:ffff",
            "web-2:77:0000",
            "Web 3.example.com:1:abcd",
            "ünïcode-host:9:1234",
            "a",
            "z" * 300,
            "host.with.dots:12:beef",
        ]
        shuffled = names[:]
        random.Random(7219).shuffle(shuffled)
        for name in shuffled:
            await within(fleet.announce(name, TTL_MS))
        listed = _names(await within(fleet.members()))
        assert listed == sorted(names), (
            f"M1: members() is sorted by instance id (code points), expected {sorted(names)}, "
            f"got {listed}"
        )
        elsewhere = await self.open(harness, prefix="m1-elsewhere")
        assert await within(membership(harness, elsewhere).members()) == [], (
            "M1: another prefix lists none of this prefix's members"
        )

    @rule("M1")
    @pytest.mark.asyncio
    async def test_M1_stats_round_trip(self, harness: BackendHarness) -> None:
        store = await self.open(harness)
        fleet = membership(harness, store)
        stats = {
            "claims": 0,
            "wins": 2**53 + 1,
            "fallbacks": 2**63 - 1,
            "skew_ms": -(2**63),
            "contended_wins": 7,
        }
        wrote = await within(fleet.announce("stats:1", TTL_MS, stats))
        plain = await within(fleet.announce("plain:1", TTL_MS))
        listed = {m.instance: dict(m.stats) for m in await within(fleet.members())}
        assert listed == {"stats:1": stats, "plain:1": {}} and dict(wrote.stats) == stats, (
            f"M1: stats come back as announced, exactly (64-bit ints, none without stats), got "
            f"{listed} and {wrote}, {plain}"
        )

    @rule("M1")
    @pytest.mark.asyncio
    async def test_M1_bad_announces_are_refused(self, harness: BackendHarness) -> None:
        """Bad input is a ConfigError naming what is wrong, and writes no member."""
        store = await self.open(harness)
        fleet = membership(harness, store)
        bad: list[tuple[object, object, object, str]] = [
            ("", TTL_MS, None, "instance"),
            ("line\nbreak", TTL_MS, None, "instance"),
            ("x" * 301, TTL_MS, None, "instance"),
            ("w:1", 0, None, "ttl"),
            ("w:1", -5, None, "ttl"),
            ("w:1", 10**12, None, "ttl"),
            ("w:1", "15s", None, "ttl"),
            ("w:1", TTL_MS, {"wins": 1.5}, "wins"),
            ("w:1", TTL_MS, {"wins": True}, "wins"),
            ("w:1", TTL_MS, {"wins": 2**64}, "wins"),
            ("w:1", TTL_MS, {"no spaces": 1}, "stats"),
            ("w:1", TTL_MS, {f"c{n}": n for n in range(1000)}, "stats"),
        ]
        for instance, ttl, stats, named in bad:
            with pytest.raises(ConfigError, match=named):
                await within(fleet.announce(instance, ttl, stats))  # type: ignore[arg-type]
        assert await within(fleet.members()) == [], "M1: a refused announce writes no member"

    @rule("M1")
    @pytest.mark.asyncio
    async def test_M1_a_fleet_of_many_announces_and_lists(self, harness: BackendHarness) -> None:
        """`FLEET` members announce at once from a few store objects; one members() call lists
        each once, sorted."""
        stores = [await self.open(harness) for _ in range(4)]
        names = [f"node-{n:03d}:{1000 + n}:{n:04x}" for n in range(FLEET)]

        async def chain(first: int) -> list[Member]:
            # One chain of announces per store object, the chains at once: many members
            # interleave without opening a connection per member.
            fleet = membership(harness, stores[first])
            return [
                await fleet.announce(names[n], TTL_MS, {"n": n})
                for n in range(first, FLEET, len(stores))
            ]

        chains = await within(asyncio.gather(*(chain(i) for i in range(len(stores)))), 60)
        announced = sorted((m for c in chains for m in c), key=lambda m: m.instance)
        assert [m.instance for m in announced] == names, "M1: each announce returns its member"
        listed = await within(membership(harness, stores[0]).members())
        assert _names(listed) == sorted(names), (
            f"M1: one members() call lists all {FLEET} live members once, sorted; got "
            f"{len(listed)} ({_names(listed)[:5]} ...)"
        )
        assert {m.instance: m.stats.get("n") for m in listed} == {
            name: n for n, name in enumerate(names)
        }, "M1: each member of the fleet comes back with its own stats"

    @rule("M1", "R1")
    @pytest.mark.asyncio
    async def test_M1_members_read_on_a_read_only_store(self, harness: BackendHarness) -> None:
        require(harness, "membership")
        require_read_only(harness)
        writer = await self.open(harness, prefix="m1read")
        fleet = membership(harness, writer)
        await self.win(writer, self.request("m1ro", await self.current_slot(writer)))
        reader = await within(harness.open_store(prefix="m1read", read_only=True), 30)
        assert await within(membership(harness, reader).members()) == [], (
            "M1: opened read-only, a store where no member announced lists none"
        )
        member = await within(fleet.announce("ro:1", TTL_MS, {"wins": 4}))
        listed = await within(membership(harness, reader).members())
        assert listed == [member], (
            f"M1: opened read-only, the store lists the members: {[member]}, got {listed}"
        )
