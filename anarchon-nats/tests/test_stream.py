"""The stream on open: created once with our settings, checked when it exists, refused (and left
unchanged) when its settings differ; bad options are a `ConfigError` before connecting."""

from __future__ import annotations

import asyncio

import nats
import pytest
from nats.js.api import StorageType, StreamConfig

from anarchon import ConfigError, StoreUnavailable
from anarchon_nats import NATSStore

from .conftest import NATS_URL, StoreFactory


async def raw_config(name: str) -> StreamConfig:
    nc = await nats.connect(NATS_URL)
    try:
        return (await nc.jetstream().stream_info(name)).config
    finally:
        await nc.close()


async def test_stream_created_with_our_settings(stores: StoreFactory, prefix: str) -> None:
    store = await stores(duplicate_window_ms="2m", max_age_ms="3h")
    config = await raw_config(f"ANARCHON_{prefix}")
    assert config.subjects == [f"{prefix}.*.claims"]
    assert config.storage == StorageType.FILE
    assert config.duplicate_window == 120 and config.max_age == 3 * 3600
    assert store.stream == config.name


async def test_many_instances_open_one_new_stream_at_once(
    stores: StoreFactory, prefix: str
) -> None:
    opened = await asyncio.gather(*(stores() for _ in range(12)))
    assert len({s.stream for s in opened}) == 1


async def test_existing_stream_with_other_settings_is_refused_and_unchanged(
    stores: StoreFactory, prefix: str
) -> None:
    await stores(duplicate_window_ms="2m")
    before = await raw_config(f"ANARCHON_{prefix}")
    with pytest.raises(ConfigError) as info:
        await stores(duplicate_window_ms="5m")
    message = str(info.value)
    assert "duplicate_window_ms is 120000, expected 300000" in message
    assert "never changes a stream" in message
    with pytest.raises(ConfigError, match="subjects"):
        await stores(strategy="expected-seq")
    with pytest.raises(ConfigError, match="max_age_ms"):
        await stores(duplicate_window_ms="2m", max_age_ms="2h")
    assert await raw_config(f"ANARCHON_{prefix}") == before


async def test_foreign_stream_of_the_same_name_is_refused(prefix: str) -> None:
    nc = await nats.connect(NATS_URL)
    name = f"ANARCHON_{prefix}"
    try:
        js = nc.jetstream()
        await js.add_stream(name=name, subjects=[f"{prefix}.other"], max_msgs=10)
        store = NATSStore.create(NATS_URL, prefix=prefix)
        with pytest.raises(ConfigError) as info:
            await store.open()
        assert "max_msgs is 10, expected -1" in str(info.value)
        assert (await js.stream_info(name)).config.subjects == [f"{prefix}.other"]
    finally:
        await nc.close()


async def test_overlapping_subjects_are_a_clear_error(prefix: str) -> None:
    nc = await nats.connect(NATS_URL)
    try:
        js = nc.jetstream()
        await js.add_stream(name=f"ANARCHON_{prefix}", subjects=[f"{prefix}.>"])
        store = NATSStore.create(NATS_URL, prefix=prefix, stream=f"other{prefix}")
        with pytest.raises(ConfigError, match="overlap"):
            await store.open()
    finally:
        await nc.close()


@pytest.mark.parametrize(
    ("options", "message"),
    [
        ({"strategy": "lease"}, "strategy must be one of msg-id, expected-seq"),
        ({"stream": "a.b"}, "not a valid stream name"),
        ({"duplicate_window_ms": "2h", "max_age_ms": "1h"}, "must not exceed max_age_ms"),
        ({"replicas": "7"}, "replicas must be from 1 to 5"),
        ({"storage": "disk"}, "storage must be one of file, memory"),
        ({"tls_cert_file": "/x.pem"}, "go together"),
        ({"bogus": "1"}, "valid options"),
    ],
)
def test_bad_options(options: dict[str, str], message: str) -> None:
    with pytest.raises(ConfigError, match=message):
        NATSStore.create(NATS_URL, **options)


def test_bad_urls() -> None:
    with pytest.raises(ConfigError, match="path"):
        NATSStore.create("nats://127.0.0.1:4222/db")


async def test_unreachable_server_is_store_unavailable() -> None:
    from .conftest import free_port

    store = NATSStore.create(f"nats://127.0.0.1:{free_port()}", timeout_ms="500ms")
    with pytest.raises(StoreUnavailable, match="cannot be reached"):
        await store.open()
