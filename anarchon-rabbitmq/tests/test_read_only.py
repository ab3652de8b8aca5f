"""R1 and the job list on RabbitMQ (issue 26): a store opened read-only declares nothing, the
jobs come from the management plugin's HTTP API (``management_url``: AMQP cannot list queues),
and a user with read permission only (``configure '^$'``, ``write '^$'``, ``read '.*'``, tag
``management``) runs ``anarchon status`` and ``history``, which say RabbitMQ keeps no history.

The oracle is ``rabbitmqctl list_queues``, run as root behind the store's back.
"""

from __future__ import annotations

import asyncio
import base64
import json
import os
import secrets
import subprocess
import sys
import time
import urllib.request
from collections.abc import AsyncIterator, Iterator
from typing import Any
from urllib.parse import urlsplit

import pytest

from anarchon import ClaimRequest, ConfigError, StoreNotSetUp
from anarchon_rabbitmq import RabbitMQStore
from anarchon_rabbitmq._management import Management

from .conftest import AMQP_URL

MANAGEMENT_URL = os.environ.get("ANARCHON_TEST_RABBITMQ_MANAGEMENT_URL", "http://127.0.0.1:15672")

pytestmark = pytest.mark.processes  # rabbitmqctl, the CLI


def _management_reason() -> str | None:
    parts = urlsplit(AMQP_URL)
    login = f"{parts.username or 'guest'}:{parts.password or 'guest'}".encode()
    request = urllib.request.Request(
        f"{MANAGEMENT_URL}/api/overview",
        headers={"Authorization": "Basic " + base64.b64encode(login).decode()},
    )
    try:
        with urllib.request.urlopen(request, timeout=3):
            return None
    except OSError as exc:  # HTTPError and URLError are OSErrors
        return f"{type(exc).__name__}: {exc}"


@pytest.fixture(scope="module")
def management() -> str:
    reason = _management_reason()
    if reason is not None:
        pytest.skip(
            f"RabbitMQ's management API at {MANAGEMENT_URL} does not answer ({reason}): "
            "rabbitmq-plugins enable rabbitmq_management, or set "
            "ANARCHON_TEST_RABBITMQ_MANAGEMENT_URL"
        )
    return MANAGEMENT_URL


def rabbitmqctl(*args: str) -> str:
    done = subprocess.run(
        ["rabbitmqctl", *args], capture_output=True, text=True, timeout=120, check=False
    )
    assert done.returncode == 0, done.stderr
    return done.stdout


def queues_of(prefix: str) -> list[dict[str, Any]]:
    """The prefix's queues as the broker holds them: name, messages, arguments."""
    out = rabbitmqctl(
        "list_queues", "-q", "--formatter", "json", "name", "messages", "arguments", "durable"
    )
    return sorted(
        (q for q in json.loads(out or "[]") if q["name"].startswith(f"{prefix}.")),
        key=lambda q: q["name"],
    )


@pytest.fixture
def reader() -> Iterator[tuple[str, str]]:
    """A user that may only read (and log in to the management API); deleted afterwards."""
    name = f"anarchon-reader-{secrets.token_hex(4)}"
    password = f"pw-{secrets.token_hex(8)}"
    rabbitmqctl("add_user", name, password)
    try:
        rabbitmqctl("set_user_tags", name, "management")
        rabbitmqctl("set_permissions", "-p", "/", name, "^$", "^$", ".*")
        yield name, password
    finally:
        rabbitmqctl("delete_user", name)


def url_of(user: str, password: str, **options: str) -> str:
    parts = urlsplit(AMQP_URL)
    query = "&".join(f"{k}={v}" for k, v in options.items())
    return f"{parts.scheme}://{user}:{password}@{parts.hostname}:{parts.port or 5672}/?{query}"


def now_ms() -> int:
    return time.time_ns() // 1_000_000


@pytest.fixture
async def claimed(prefix: str, cleanup: set[str]) -> AsyncIterator[tuple[str, list[int]]]:
    """Runs of jobs ``report`` (two slots) and ``backup`` (one) claimed as guest."""
    store = RabbitMQStore.create(AMQP_URL, prefix=prefix, prepare_ahead_ms=0)
    await store.open()
    base = now_ms() // 1000 * 1000
    slots = [base - 2000, base - 1000]
    try:
        for job, job_slots in (("report", slots), ("backup", slots[:1])):
            for slot in job_slots:
                claim = await store.claim(ClaimRequest(job=job, slot=slot, instance="web-1"))
                assert claim.won, claim
                cleanup.add(f"{prefix}.{job}.slot.{slot}")
    finally:
        await store.close()
    yield prefix, slots


async def test_jobs_lists_the_jobs_with_a_run_queue(
    management: str, claimed: tuple[str, list[int]]
) -> None:
    prefix, _ = claimed
    store = RabbitMQStore.create(AMQP_URL, prefix=prefix, management_url=management)
    await store.open()
    try:
        assert await store.jobs() == ["backup", "report"]
    finally:
        await store.close()
    # Page by page (three queues, two to a page) the same.
    listing = Management(store.url, store.options)
    assert await listing.jobs(page_size=2) == ["backup", "report"]
    assert len(await listing.queue_names(page_size=1)) == 3


async def test_jobs_without_management_url_says_how_to_set_it(prefix: str) -> None:
    store = RabbitMQStore.create(AMQP_URL, prefix=prefix)
    await store.open()
    try:
        with pytest.raises(ConfigError, match=r"management_url=http://HOST:15672"):
            await store.jobs()
    finally:
        await store.close()


def test_management_url_must_be_http() -> None:
    with pytest.raises(ConfigError, match="management_url must be"):
        RabbitMQStore.create(AMQP_URL, management_url="amqp://127.0.0.1:15672")


async def test_R1_read_only_open_of_an_unused_prefix_is_not_set_up(
    management: str, prefix: str
) -> None:
    for _ in range(2):
        store = RabbitMQStore.create(AMQP_URL, prefix=prefix, management_url=management)
        with pytest.raises(StoreNotSetUp) as caught:
            await store.open_read_only()
        await store.close()
        assert f"no run queue of prefix {prefix!r} in virtual host '/'" in str(caught.value)
    assert queues_of(prefix) == []


async def test_R1_a_user_allowed_only_reads_lists_jobs_and_declares_nothing(
    management: str, claimed: tuple[str, list[int]], reader: tuple[str, str]
) -> None:
    prefix, slots = claimed
    user, password = reader
    before = queues_of(prefix)
    assert len(before) == 3
    url = url_of(user, password, prefix=prefix, management_url=management)

    store = RabbitMQStore.create(url)
    await store.open_read_only()
    try:
        assert await store.jobs() == ["backup", "report"]
        assert await store.history("report") == []
        with pytest.raises(ConfigError, match="opened read-only"):
            await store.claim(ClaimRequest(job="report", slot=slots[0], instance="r"))
    finally:
        await store.close()

    # The reader cannot claim at all: the broker refuses its declaration.
    store = RabbitMQStore.create(url)
    await store.open()
    try:
        with pytest.raises(ConfigError, match="refused queue"):
            await store.claim(ClaimRequest(job="fresh", slot=slots[0], instance="r"))
    finally:
        await store.close()

    def cli(*args: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            [sys.executable, "-m", "anarchon.cli", *args],
            capture_output=True,
            text=True,
            timeout=60,
            check=False,
        )

    history, status = await asyncio.gather(
        asyncio.to_thread(cli, "history", url, "report"),
        asyncio.to_thread(cli, "status", url, "--once"),
    )
    for done in (history, status):
        assert done.returncode != 0 and "Traceback" not in done.stderr, done.stderr
        assert "keeps no run history" in done.stderr, done.stderr
        assert password not in done.stdout + done.stderr
    assert queues_of(prefix) == before
