"""The fleet in one process on memory:// (DESIGN section 12): the member list (M1), the role of
each (job, slot), the grace fallback when contenders are gone, the counters and where they show.
Real processes on a shared store are in test_fleet_processes.py."""

from __future__ import annotations

import asyncio
import collections
import json
import logging

import pytest
from click.testing import CliRunner

from anarchon import ConfigError, Member, MemoryStore, Run, Scheduler, StoreCorrupt
from anarchon._fleet import contenders, job_set_fingerprint
from anarchon._runtime.fleet import Role, fleet_grace_ms, job_signature
from anarchon._runtime.settings import Settings, load_settings
from anarchon.cli import cli
from anarchon_test_support import eventually


def scheduler(store: MemoryStore, name: str, **kwargs: object) -> Scheduler:
    """A scheduler with the fleet on (`contenders=2`, the default) unless `kwargs` say."""
    kwargs.setdefault("contenders", 2)
    return Scheduler(store, instance=name, environ={}, **kwargs)  # type: ignore[arg-type]


class Clock:
    def __init__(self, now: int = 1_000_000) -> None:
        self.now = now

    def __call__(self) -> int:
        return self.now


# -- M1 on memory:// ---------------------------------------------------------------------------
async def test_M1_members_are_live_until_their_ttl_and_keep_their_start() -> None:
    clock = Clock()
    store = MemoryStore.create("m1-ttl", clock=clock)
    first = await store.announce("b", 1_000, {"wins": 1})
    await store.announce("a", 5_000)
    clock.now += 600
    again = await store.announce("b", 1_000, {"wins": 2})
    assert again.started_ms == first.started_ms == 1_000_000
    assert again.seen_ms == 1_000_600 and again.until_ms == 1_001_600
    assert [m.instance for m in await store.members()] == ["a", "b"]
    assert (await store.members())[1].stats == {"wins": 2}
    clock.now += 1_001
    assert [m.instance for m in await store.members()] == ["a"]
    rejoined = await store.announce("b", 1_000)
    assert rejoined.started_ms == clock.now, "a member whose ttl ran out joins anew"
    assert await store.leave("a") is True
    assert await store.leave("a") is False
    assert [m.instance for m in await store.members()] == ["b"]


async def test_M1_prefixes_do_not_share_members_and_read_only_sees_them() -> None:
    await MemoryStore.create("m1-prefix", prefix="one").announce("a", 10_000)
    assert await MemoryStore.create("m1-prefix", prefix="two").members() == []
    reader = MemoryStore.create("m1-prefix", prefix="one")
    await reader.open_read_only()
    assert [m.instance for m in await reader.members()] == ["a"]


async def test_M1_a_bad_ttl_is_a_config_error() -> None:
    with pytest.raises(ConfigError, match="ttl_ms"):
        await MemoryStore.create("m1-bad").announce("a", 0)


# -- settings ----------------------------------------------------------------------------------
def _fleet_settings(settings: Settings) -> tuple[int, int, int, int]:
    return (
        settings.contenders,
        settings.fleet_watchers,
        settings.fleet_grace_ms,
        settings.fleet_refresh_ms,
    )


def test_fleet_settings_defaults_and_errors() -> None:
    assert _fleet_settings(load_settings({}, environ={})) == (2, 1, 500, 5_000)
    env = {
        "ANARCHON_CONTENDERS": "off",
        "ANARCHON_FLEET_GRACE": "3s",
        "ANARCHON_FLEET_WATCHERS": "3",
    }
    settings = load_settings({"fleet_refresh": "1s"}, environ=env)
    assert _fleet_settings(settings) == (0, 3, 3_000, 1_000)
    with pytest.raises(ConfigError, match=r"contenders \(from code\) must be a whole number"):
        load_settings({"contenders": -1}, environ={})
    with pytest.raises(ConfigError, match=r"fleet_watchers \(from environment variable .*none"):
        load_settings({}, environ={"ANARCHON_FLEET_WATCHERS": "many"})
    with pytest.raises(ConfigError, match=r"fleet_refresh .* at least 100 ms"):
        load_settings({"fleet_refresh": "10ms"}, environ={})


def test_no_fleet_when_turned_off_or_the_store_keeps_no_members() -> None:
    assert scheduler(MemoryStore.create(), "a").fleet is not None
    assert scheduler(MemoryStore.create(), "a", contenders=0).fleet is None
    on_by_default = Scheduler(MemoryStore.create(), instance="a", environ={}).fleet
    assert on_by_default is not None and (on_by_default.k, on_by_default.w) == (2, 1)


# -- roles -------------------------------------------------------------------------------------
async def test_roles_follow_rendezvous_over_the_members_read() -> None:
    store = MemoryStore.create("roles")
    s = scheduler(store, "me", contenders=2)
    assert s.fleet is not None
    assert s.fleet.role("job", 1000) is Role.CONTEND, "no member list yet: contend for everything"
    same = {"job_set": s.fleet.job_set}
    for other in ("b", "c", "d", "e"):
        await store.announce(other, 60_000, same)
    await store.announce("x", 60_000, {"job_set": s.fleet.job_set + 1})
    await store.announce("y", 60_000)
    await s.fleet.beat()
    assert s.fleet.role("job", 1000) is Role.CONTEND, (
        "not in the list itself: contend for everything"
    )
    await store.announce("me", 60_000, same)
    await s.fleet.beat()
    names = ["b", "c", "d", "e", "me"]
    mine = [slot for slot in range(0, 200_000, 1000) if "me" in contenders(names, "job", slot, 2)]
    watched = [
        slot
        for slot in range(0, 200_000, 1000)
        if slot not in mine and "me" in contenders(names, "job", slot, 3)
    ]
    assert 20 < len(mine) < 140, "about 2 slots in 5"
    assert 5 < len(watched) < 80, "about 1 slot in 5"
    for slot in range(0, 200_000, 1000):
        role = s.fleet.role("job", slot)
        assert (role is Role.CONTEND) is (slot in mine), "x and y run other jobs"
        assert (role is Role.WATCH) is (slot in watched)


def test_the_grace_is_at_most_half_of_max_late() -> None:
    s = scheduler(MemoryStore.create(), "a")
    fast = s.add_job(lambda: None, "* * * * * *", name="fast", max_late="600ms")
    slow = s.add_job(lambda: None, "* * * * *", name="slow")
    assert fleet_grace_ms(1_000, fast) == 300
    assert fleet_grace_ms(1_000, slow) == 1_000


# -- fleets in one process ---------------------------------------------------------------------
@pytest.mark.slow
async def test_contenders_claim_and_the_others_stay_silent() -> None:
    """Four instances, eight jobs a second, k=2: every (job, slot) runs once, and once every
    instance knows the members, only the two contenders of each claim it at its slot."""
    runs: collections.Counter[tuple[str, int]] = collections.Counter()
    fleet = []
    for i in range(4):
        s = scheduler(MemoryStore.create("silent"), f"i{i}", fleet_refresh="200ms")
        for j in range(8):
            s.add_job(lambda run: runs.update([(run.job, run.slot)]), "* * * * * *", name=f"j{j}")
        fleet.append(s)
    for s in fleet:
        await s.start()
    await eventually(lambda: all(len(s.fleet.members) == 4 for s in fleet if s.fleet), 5)
    known = fleet[0].store_clock.now_ms() // 1000 * 1000 + 1000
    clock = fleet[0].store_clock

    async def between_slots() -> None:
        """Until the clock is 800-950 ms into a second: the slot's claims (at its start) and
        its watcher's reads (half a second later) are counted, the next slot's not yet."""
        await eventually(lambda: 800 <= clock.now_ms() % 1000 < 950, 3, "mid-second")

    await eventually(lambda: len({slot for _, slot in runs if slot >= known}) >= 3, 8)
    await between_slots()
    before = [s.fleet.counters.as_stats() for s in fleet if s.fleet]
    await eventually(lambda: len({slot for _, slot in runs if slot >= known}) >= 5, 8)
    await between_slots()
    after = [s.fleet.counters.as_stats() for s in fleet if s.fleet]
    ran = sum(runs.values())
    for s in fleet:
        await s.stop()
    assert max(runs.values()) == 1, "a (job, slot) ran twice"
    claims = sum(a["claims"] - b["claims"] for a, b in zip(after, before, strict=True))
    reads = sum(a["reads"] - b["reads"] for a, b in zip(after, before, strict=True))
    assert claims > 0 and claims == 2 * reads, "two contenders and one watcher per (job, slot)"
    assert sum(a["fallbacks"] for a in after) == 0, "live contenders left nothing to fall back"
    assert sum(a["orphans"] for a in after) == 0, "nobody left: the silent one stayed silent"
    assert sum(a["wins"] for a in after) == ran, "every run was won at its slot, and counted"
    assert await MemoryStore.create("silent").members() == [], "each left on stop"


@pytest.mark.slow
async def test_slots_of_dead_contenders_are_decided_after_the_grace() -> None:
    """A member that announced itself and died (it never claims) is a contender of about half
    the slots with k=1: the live instance claims those after the grace, none is lost."""
    store = MemoryStore.create("ghost")
    started: dict[tuple[str, int], int] = {}
    s = scheduler(store, "live", contenders=1, fleet_grace="300ms", fleet_refresh="200ms")
    for j in range(6):

        @s.job("* * * * * *", name=f"j{j}", max_late="900ms")
        def tick(run: Run) -> None:
            started[(run.job, run.slot)] = s.store_clock.now_ms()

    job_set = job_set_fingerprint(job_signature(spec) for spec in s.jobs.values())
    await store.announce("ghost", 60_000, {"job_set": job_set})
    async with s:
        await eventually(lambda: len(s.fleet.members) == 2 if s.fleet else False, 5)
        first = s.store_clock.now_ms() // 1000 * 1000 + 1000
        await eventually(lambda: len([k for k in started if k[1] >= first]) >= 18, 8)
        stats = s.fleet.counters.as_stats() if s.fleet else {}
        health = s.health()
    late = [
        at - slot
        for (job, slot), at in started.items()
        if slot >= first and contenders(["ghost", "live"], job, slot, 1) == ["ghost"]
    ]
    on_time = [
        at - slot
        for (job, slot), at in started.items()
        if slot >= first and contenders(["ghost", "live"], job, slot, 1) == ["live"]
    ]
    assert late and on_time
    assert all(300 <= d < 800 for d in late), f"fallbacks start a grace after the slot: {late}"
    assert all(d < 300 for d in on_time), on_time
    assert stats["fallbacks"] >= len(late) and stats["wins"] >= len(late) + len(on_time)
    assert [m.instance for m in health.members] == ["ghost", "live"]
    assert health.fleet_stats["fallbacks"] == stats["fallbacks"]
    data = json.loads(json.dumps(health.to_dict()))
    assert data["members"][1]["instance"] == "live"
    assert "wins" in data["members"][1]["stats"]


@pytest.mark.slow
async def test_without_a_fleet_every_instance_claims() -> None:
    runs: collections.Counter[int] = collections.Counter()
    fleet = [
        scheduler(MemoryStore.create("off"), f"i{i}", contenders=0, fleet_refresh="200ms")
        for i in range(3)
    ]
    for s in fleet:
        s.add_job(lambda run: runs.update([run.slot]), "* * * * * *", name="tick")
        await s.start()
    await eventually(lambda: len(runs) >= 2, 5)
    for s in fleet:
        await s.stop()
    assert max(runs.values()) == 1
    assert await MemoryStore.create("off").members() == [], "no heartbeat without a fleet"


# -- anarchon status ---------------------------------------------------------------------------
def test_status_lists_the_live_members_with_their_wins() -> None:
    store = MemoryStore.create("status-members")
    asyncio.run(store.open())
    asyncio.run(store.announce("web-1", 60_000, {"claims": 7, "wins": 3, "fallbacks": 1}))
    asyncio.run(store.announce("web-2", 60_000, {"claims": 5, "wins": 2}))
    runner = CliRunner()
    result = runner.invoke(cli, ["status", "memory://status-members", "--json"])
    assert result.exit_code == 0, result.output
    members = json.loads(result.output)["members"]
    assert [(m["instance"], m["wins"]) for m in members] == [("web-1", 3), ("web-2", 2)]
    assert members[0]["last_heartbeat"].endswith("Z") and members[0]["stats"]["claims"] == 7
    text = runner.invoke(cli, ["status", "memory://status-members", "--once"]).output
    assert "2 live instance(s)" in text and "web-1" in text and "web-2" in text


def test_the_dashboard_lists_the_live_members() -> None:
    jinja2 = pytest.importorskip("jinja2")
    from anarchon._urls import StoreURL
    from anarchon.dashboard._app import _environment
    from anarchon.dashboard._view import read_view

    store = MemoryStore.create("dash-members")
    asyncio.run(store.open())
    asyncio.run(store.announce("web-<1>", 60_000, {"claims": 7, "wins": 3, "fallbacks": 1}))
    view = asyncio.run(
        read_view(store, StoreURL.parse("memory://dash-members"), jobs=(), schedules={}, slots=5)
    )
    assert [(m.name, m.claims, m.fallbacks, m.wins) for m in view.members] == [("web-<1>", 7, 1, 3)]
    environment: jinja2.Environment = _environment()

    def render(view: object) -> str:
        return environment.get_template("content.html").render(
            view=view,
            problem=None,
            store="memory://dash-members",
            legend=(),
            refresh_ms=2000,
            refresh_s="2",
            version="test",
            control_on=False,
            controls=None,
            until_choices=(),
            flash="",
        )

    html = render(view)
    assert "Live instances" in html and "web-&lt;1&gt;" in html
    asyncio.run(store.leave("web-<1>"))
    view = asyncio.run(
        read_view(store, StoreURL.parse("memory://dash-members"), jobs=(), schedules={}, slots=5)
    )
    assert view.members == () and view.keeps_members
    html = " ".join(render(view).split())
    assert "No instance is in the member list now" in html
    assert "On a store without a member list" not in html


class DamagedMembers(MemoryStore):
    async def members(self) -> list[Member]:
        raise StoreCorrupt("member at key x holds values anarchon never writes")


async def test_a_member_list_that_cannot_be_read_makes_the_instance_claim_everything(
    caplog: pytest.LogCaptureFixture,
) -> None:
    store = DamagedMembers.create("damaged-members")
    s = scheduler(store, "me", contenders=1)
    assert s.fleet is not None
    for other in ("b", "c", "d"):
        await store.announce(other, 60_000)
    with caplog.at_level(logging.WARNING, logger="anarchon.fleet"):
        await s.fleet.beat()
        await s.fleet.beat()
    assert s.fleet.members == ()
    assert all((s.fleet.role("job", slot) is Role.CONTEND) for slot in range(0, 20_000, 1000))
    warned = [r for r in caplog.records if "member list cannot be read" in r.getMessage()]
    assert len(warned) == 1, "said once per distinct error"
