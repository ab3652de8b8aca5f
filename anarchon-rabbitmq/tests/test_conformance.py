"""Certify `amqp://` with the conformance kit, exactly as a third-party backend would.

The backdoor (`anarchon_rabbitmq.testing.raw_run`) is a passive queue declare on a raw aiormq
connection, not the store's code. The queues the kit creates expire by themselves ``slot_ttl``
(30 s here) after their creation: AMQP cannot list queues, and the kit chooses the jobs and slots.
Until then they are still there, so each harness claims under prefixes of its own (the kit's, with
the harness's run id): a test run again at once must not find the claims of its first run.

The stores get ``management_url`` when the broker's management API answers (the job list and the
read-only open's "not set up" answer need it, R1); without it the R1 check cannot pass.
"""

from __future__ import annotations

import asyncio
import base64
import os
import urllib.request
from typing import Any
from urllib.parse import urlsplit

import aiormq
import pytest

from anarchon import Capabilities, ClaimStore, RunRecord
from anarchon_conformance import DEFAULT_PREFIX, BackendHarness, ConformanceSuite
from anarchon_rabbitmq import testing

AMQP_URL = os.environ.get("ANARCHON_TEST_AMQP_URL", "amqp://guest:guest@127.0.0.1:5672/")
MANAGEMENT_URL = os.environ.get("ANARCHON_TEST_RABBITMQ_MANAGEMENT_URL", "http://127.0.0.1:15672")
SLOT_TTL_MS = 30_000
"""Longer than the kit's oldest slot (the C1 process check claims about ten seconds back), short
enough that the queues clean themselves up."""
PREPARE_AHEAD_MS = 5_000
"""The store then remembers a run 25 s after its slot (a prepared queue expires from its
preparation)."""


def _management_answers() -> bool:
    parts = urlsplit(AMQP_URL)
    login = f"{parts.username or 'guest'}:{parts.password or 'guest'}".encode()
    request = urllib.request.Request(
        f"{MANAGEMENT_URL}/api/overview",
        headers={"Authorization": "Basic " + base64.b64encode(login).decode()},
    )
    try:
        with urllib.request.urlopen(request, timeout=3):
            return True
    except OSError:
        return False


class RabbitMQHarness(BackendHarness):
    """The broker at ANARCHON_TEST_AMQP_URL; isolated by prefixes of this harness's own."""

    name = "rabbitmq"
    management = False
    """Whether the management API answers (then the stores get ``management_url``)."""

    async def setup(self) -> None:
        try:
            connection = await aiormq.connect(AMQP_URL)
        except Exception as exc:  # noqa: BLE001 - any failure means: skip, saying why
            pytest.skip(f"RabbitMQ does not answer: {type(exc).__name__}")
        self.version = str(connection.server_properties.get("version", "?"))
        await connection.close()
        self.management = await asyncio.to_thread(_management_answers)

    def url(self, address: tuple[str, int] | None = None) -> str:
        parts = urlsplit(AMQP_URL)
        netloc = parts.netloc
        if address is not None:
            user = netloc.rsplit("@", 1)[0] + "@" if "@" in netloc else ""
            netloc = f"{user}{address[0]}:{address[1]}"
        query = f"slot_ttl_ms={SLOT_TTL_MS}&prepare_ahead_ms={PREPARE_AHEAD_MS}"
        if self.management:
            query += f"&management_url={MANAGEMENT_URL}"
        return f"{parts.scheme}://{netloc}{parts.path or '/'}?{query}"

    def address(self) -> tuple[str, int] | None:
        parts = urlsplit(AMQP_URL)
        return (parts.hostname or "127.0.0.1", parts.port or 5672)

    def mine(self, prefix: str) -> str:
        """The kit's `prefix` as this harness uses it (the kit's process check claims under its
        `process_prefix`, unique per harness as well)."""
        return f"{prefix}-{self.run_id}"

    async def open_store(
        self,
        *,
        prefix: str = DEFAULT_PREFIX,
        address: tuple[str, int] | None = None,
        **options: Any,
    ) -> ClaimStore:
        return await super().open_store(prefix=self.mine(prefix), address=address, **options)

    @property
    def capabilities(self) -> Capabilities:
        return Capabilities(
            leases=False,
            self_recognition=False,
            fencing=False,
            overlap=False,
            history=False,
            store_clock=False,
            skips=False,
            remembers_ms=SLOT_TTL_MS - PREPARE_AHEAD_MS,
        )

    def short_memory(self, remembers_ms: int) -> dict[str, Any] | None:
        """A queue that expires `remembers_ms` after it is made, never prepared ahead (so the
        store remembers a run that long after its slot, and a claim that long from its write)."""
        return {"slot_ttl_ms": max(remembers_ms, 1_000), "prepare_ahead_ms": 0}

    async def server_version(self) -> str:
        return f"RabbitMQ {self.version}"

    async def force_expire(self, job: str, slot: int, *, prefix: str = DEFAULT_PREFIX) -> None:
        raise NotImplementedError("RabbitMQ runs hold no leases")

    async def raw_run(
        self, job: str, slot: int, *, prefix: str = DEFAULT_PREFIX
    ) -> RunRecord | None:
        """Whether the run's queue holds a claim (the token stays empty: `testing.raw_run`)."""
        return await testing.raw_run(AMQP_URL, self.mine(prefix), job, slot)


class TestRabbitMQConformance(ConformanceSuite):
    harness_class = RabbitMQHarness
