"""The RabbitMQ tests run against the broker at ``ANARCHON_TEST_AMQP_URL`` (default: the local
one, guest/guest). Each test uses its own prefix and deletes the queues it knows it created, over
a raw aiormq connection that bypasses the store (the tests' oracle: `anarchon_rabbitmq.testing`)."""

from __future__ import annotations

import asyncio
import os
import uuid
from collections.abc import AsyncIterator, Iterable
from pathlib import Path
from urllib.parse import urlsplit

import aiormq
import pytest
import pytest_asyncio

from anarchon_rabbitmq import testing
from anarchon_test_support import mark_services

AMQP_URL = os.environ.get("ANARCHON_TEST_AMQP_URL", "amqp://guest:guest@127.0.0.1:5672/")


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """Every test here needs the RabbitMQ broker: ``pytest -m "not services"`` leaves them out."""
    mark_services(items, Path(__file__).parent)


def _reason() -> str | None:
    async def check() -> None:
        connection = await asyncio.wait_for(aiormq.connect(AMQP_URL), 5)
        await connection.close()

    try:
        asyncio.run(check())
    except Exception as exc:  # noqa: BLE001 - any failure means: skip, saying why
        return f"{type(exc).__name__}: {exc}"
    return None


_REASON = _reason()


def require_broker() -> None:
    if _REASON is not None:
        pytest.skip(
            f"RabbitMQ at {urlsplit(AMQP_URL).hostname} does not answer ({_REASON}); start it "
            "with scripts/services or set ANARCHON_TEST_AMQP_URL"
        )


def address() -> tuple[str, int]:
    parts = urlsplit(AMQP_URL)
    return (parts.hostname or "127.0.0.1", parts.port or 5672)


def url_via(host: str, port: int, *, password: str | None = None) -> str:
    """AMQP_URL reached through ``host:port`` (the fault proxy), optionally with another
    password."""
    parts = urlsplit(AMQP_URL)
    user = parts.username or "guest"
    secret = parts.password if password is None else password
    return f"{parts.scheme}://{user}:{secret}@{host}:{port}{parts.path or '/'}"


async def message_count(queue: str) -> int | None:
    return await testing.message_count(AMQP_URL, queue)


async def stored_body(queue: str) -> dict[str, object] | None:
    return await testing.stored_body(AMQP_URL, queue)


async def stored_token(queue: str) -> str | None:
    return await testing.stored_token(AMQP_URL, queue)


async def delete_queues(names: Iterable[str]) -> None:
    await testing.delete_queues(AMQP_URL, names)


@pytest.fixture
def prefix() -> str:
    require_broker()
    return "t" + uuid.uuid4().hex[:12]


@pytest_asyncio.fixture
async def cleanup() -> AsyncIterator[set[str]]:
    """Queue names the test adds here are deleted afterwards."""
    names: set[str] = set()
    yield names
    if names:
        await delete_queues(sorted(names))
