"""Certify `nats://` with the conformance kit, both strategies, exactly as a third-party backend
would: one harness per strategy, backdoors (`anarchon_nats.testing`) on a raw nats-py client
(not the store's code).

The kit's prefixes get this harness's run id appended, so each test has its own streams on the
shared server; cleanup deletes them. Windows are short (30 s) so that T3 is sampled within the
kit's budget, yet longer than the proxy checks' resends take.
"""

from __future__ import annotations

import os
from typing import Any, ClassVar
from urllib.parse import urlsplit

import nats
import pytest

import anarchon
from anarchon import Capabilities, ClaimStore, RunRecord
from anarchon_conformance import DEFAULT_PREFIX, BackendHarness, ConformanceSuite
from anarchon_nats import testing

NATS_URL = os.environ.get("ANARCHON_TEST_NATS_URL", "nats://127.0.0.1:4222")


class NATSHarness(BackendHarness):
    strategy: ClassVar[str] = "msg-id"
    options: ClassVar[dict[str, str]] = {}

    async def setup(self) -> None:
        self.base = self.given_url or NATS_URL
        try:
            self.nc = await nats.connect(self.base, connect_timeout=2, allow_reconnect=False)
            await self.nc.jetstream().account_info()
        except Exception as exc:  # noqa: BLE001 - any failure: skip with the reason
            pytest.skip(f"no NATS JetStream at {self.base} ({exc}): start it with scripts/services")
        self.js = self.nc.jetstream()
        self.streams = {f"C{self.run_id}"}

    async def cleanup(self) -> None:
        await super().cleanup()
        for name in self.streams:
            await testing.delete_stream(self.js, name)
            await testing.delete_stream(self.js, f"{name}_MEMBERS")  # the member list (M1)
        await self.nc.close()

    @property
    def name(self) -> str:  # type: ignore[override]
        return f"nats-{self.strategy}"

    def mine(self, prefix: str) -> str:
        mapped = f"{prefix}-{self.run_id}"
        self.streams.add(f"ANARCHON_{mapped}")
        return mapped

    def url(self, address: tuple[str, int] | None = None, **extra: str) -> str:
        parts = urlsplit(self.base)
        host, port = address or (parts.hostname or "127.0.0.1", parts.port or 4222)
        query = {"strategy": self.strategy, "timeout_ms": "2s", **self.options, **extra}
        return f"nats://{host}:{port}?" + "&".join(f"{k}={v}" for k, v in query.items())

    def address(self) -> tuple[str, int] | None:
        parts = urlsplit(self.base)
        return parts.hostname or "127.0.0.1", parts.port or 4222

    def process_url(self) -> str | None:
        # Other processes connect with the kit's own prefix: give them a stream of this test.
        return self.url(stream=f"C{self.run_id}")

    async def open_store(
        self,
        *,
        prefix: str = DEFAULT_PREFIX,
        address: tuple[str, int] | None = None,
        **options: Any,
    ) -> ClaimStore:
        store = await anarchon.connect(self.url(address), prefix=self.mine(prefix), **options)
        self._stores.append(store)
        return store

    @property
    def capabilities(self) -> Capabilities:
        window = self.options.get("duplicate_window_ms", self.options.get("max_age_ms"))
        return Capabilities(
            leases=False,
            self_recognition=True,
            fencing=False,
            overlap=False,
            history=True,
            store_clock=False,
            skips=True,
            batch=True,
            membership=True,
            remembers_ms=int(window.removesuffix("s")) * 1000 if window else None,
        )

    def short_memory(self, remembers_ms: int) -> dict[str, Any] | None:
        """The stream's window, counted from the write: msg-id's duplicate window,
        expected-seq's max_age (the C5 check waits past it)."""
        if self.strategy == "msg-id":
            return {"duplicate_window_ms": remembers_ms}
        return {"max_age_ms": remembers_ms}

    async def server_version(self) -> str:
        return f"NATS {self.nc.connected_server_version}"

    async def force_expire(self, job: str, slot: int, *, prefix: str = DEFAULT_PREFIX) -> None:
        raise NotImplementedError("NATS claims hold no lease")

    async def raw_run(
        self, job: str, slot: int, *, prefix: str = DEFAULT_PREFIX
    ) -> RunRecord | None:
        """The stored claim message for (job, slot), read with plain JetStream requests."""
        return await testing.raw_run(self.js, self.mine(prefix), job, slot, strategy=self.strategy)


class MsgIdHarness(NATSHarness):
    strategy = "msg-id"
    options: ClassVar[dict[str, str]] = {"duplicate_window_ms": "30s", "max_age_ms": "60s"}


class ExpectedSeqHarness(NATSHarness):
    strategy = "expected-seq"
    options: ClassVar[dict[str, str]] = {"max_age_ms": "30s"}


class TestNATSMsgIdConformance(ConformanceSuite):
    harness_class = MsgIdHarness


class TestNATSExpectedSeqConformance(ConformanceSuite):
    harness_class = ExpectedSeqHarness
