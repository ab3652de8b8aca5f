"""The fleet's member list (M1) on Redis with damaged data, written with raw commands behind the
store's back: a field anarchon never writes is a `StoreCorrupt` naming the key and the field, a
key of another type names both member keys; an announce replaces a damaged member (it joins
anew). Every strategy keeps members in the same keys, so one strategy stands for all."""

from __future__ import annotations

from typing import TYPE_CHECKING

import pytest

from anarchon import StoreCorrupt, StoreUnavailable, SupportsMembership

if TYPE_CHECKING:
    from conftest import Env


@pytest.mark.parametrize(
    "value",
    ["garbage", "1 2 3 not-json", '3 2 1 {"wins":1}', '1 2 3 {"wins":"many"}', "1 2 3 [1]"],
)
async def test_M1_a_damaged_member_is_corrupt_naming_key_and_field(env: Env, value: str) -> None:
    store = await env.store("stream-id")
    assert isinstance(store, SupportsMembership)
    good = await store.announce("good:1", 60_000)
    members = f"{{{env.prefix}:}}:members"
    now = await env.now()
    damaged = (
        value if not value[0].isdigit() else value.replace("1 2 3", f"{now} {now} {now + 60_000}")
    )
    await env.raw.hset(members, "bad:2", damaged)
    with pytest.raises(StoreCorrupt, match=rf"{members}.*'bad:2'"):
        await store.members()
    # The member announcing again replaces what was there.
    back = await store.announce("bad:2", 60_000)
    assert await store.members() == [back, good]


async def test_M1_a_member_key_of_another_type_is_named(env: Env) -> None:
    store = await env.store("script")
    assert isinstance(store, SupportsMembership)
    members, ends = f"{{{env.prefix}:}}:members", f"{{{env.prefix}:}}:member-ends"
    await env.raw.set(members, "not a hash")
    with pytest.raises(StoreCorrupt, match=f"{members}.*{ends}"):
        await store.members()
    with pytest.raises(StoreCorrupt, match=f"{members}.*{ends}"):
        await store.announce("w:1", 60_000)


async def test_M1_a_store_that_is_not_open_is_unavailable(env: Env) -> None:
    """The runtime leaves the fleet on stop even when its store never came up: an anarchon
    error it logs, never a crash."""
    import anarchon

    store = anarchon.create_store(env.url, prefix=env.prefix)
    assert isinstance(store, SupportsMembership)
    with pytest.raises(StoreUnavailable, match="not open"):
        await store.leave("w:1")
    with pytest.raises(StoreUnavailable, match="not open"):
        await store.members()
