"""The fleet's member list (M1) on NATS beyond the kit: a message on a member's subject that
anarchon never wrote is a `StoreCorrupt` naming the subject; an announce after another writer
touched the member reads it again instead of failing (expected last subject sequence)."""

from __future__ import annotations

import hashlib
from typing import TYPE_CHECKING

import nats
import pytest

from anarchon import StoreCorrupt

from .conftest import NATS_URL

if TYPE_CHECKING:
    from .conftest import StoreFactory


def subject(prefix: str, instance: str) -> str:
    return f"_anarchon_members.{prefix}.{hashlib.sha256(instance.encode()).hexdigest()[:32]}"


async def publish(subject: str, body: bytes) -> None:
    nc = await nats.connect(NATS_URL, connect_timeout=2, allow_reconnect=False)
    try:
        await nc.jetstream().publish(subject, body)
    finally:
        await nc.close()


@pytest.mark.parametrize("body", [b"not json", b"[1, 2]", b'{"instance": "bad:2", "started": "x"}'])
async def test_M1_a_foreign_member_message_is_corrupt_naming_its_subject(
    stores: StoreFactory, prefix: str, body: bytes
) -> None:
    store = await stores()
    await store.announce("good:1", 60_000)
    where = subject(prefix, "bad:2")
    await publish(where, body)
    with pytest.raises(StoreCorrupt, match=where):
        await store.members()


async def test_M1_two_store_objects_refresh_one_member(stores: StoreFactory) -> None:
    """Each object's next announce finds the other's write (wrong last sequence), reads it and
    keeps the member's start."""
    one, other = await stores(), await stores()
    first = await one.announce("w:1", 60_000, {"n": 1})
    second = await other.announce("w:1", 60_000, {"n": 2})
    third = await one.announce("w:1", 60_000, {"n": 3})
    assert first.started_ms == second.started_ms == third.started_ms
    assert await other.members() == [third]
