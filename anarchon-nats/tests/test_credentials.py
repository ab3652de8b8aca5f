"""Credentials never appear in errors, logs or reprs: a private server that requires a login."""

from __future__ import annotations

import logging
import time
from pathlib import Path

import pytest

import anarchon
from anarchon import ClaimRequest, StoreUnavailable
from anarchon_nats import NATSStore

from .conftest import PrivateServer, require_binary

PASSWORD = "s3cr3t-Pa55word"


@pytest.fixture
def auth_server(tmp_path: Path) -> PrivateServer:
    require_binary()
    server = PrivateServer(tmp_path, "--user", "app", "--pass", PASSWORD)
    server.start()
    yield server  # type: ignore[misc]
    server.stop()


async def test_login_with_user_and_password(auth_server: PrivateServer) -> None:
    url = f"nats://app:{PASSWORD}@127.0.0.1:{auth_server.port}"
    async with anarchon.connect(url) as store:
        assert PASSWORD not in repr(store) and PASSWORD not in str(store.url)
        claim = await store.claim(
            ClaimRequest(job="job", slot=time.time_ns() // 1_000_000, instance="i")
        )
        assert claim.won


@pytest.mark.parametrize("wrong", ["wrong-Pa55word", PASSWORD[:-1]])
async def test_wrong_password_error_hides_it(
    auth_server: PrivateServer, wrong: str, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.DEBUG)
    store = NATSStore.create(f"nats://app:{wrong}@127.0.0.1:{auth_server.port}")
    with pytest.raises(StoreUnavailable) as info:
        await store.open()
    message = str(info.value)
    assert "app:***@" in message and "Authorization" in message, message
    for text in (message, repr(info.value), caplog.text, repr(store)):
        assert wrong not in text and PASSWORD not in text


async def test_token_is_hidden(auth_server: PrivateServer) -> None:
    store = NATSStore.create(f"nats://{PASSWORD}@127.0.0.1:{auth_server.port}")
    assert "***@" in repr(store)
    with pytest.raises(StoreUnavailable) as info:
        await store.open()
    assert PASSWORD not in str(info.value) and PASSWORD not in repr(store)
