"""The conformance kit's single-winner and idempotence rules (C1, C2) on the session's three-node
cluster, with an R3 stream and a URL naming every server: the CI-affordable part of certifying
``nats://`` on a cluster (the whole kit runs against the single server in test_conformance.py)."""

from __future__ import annotations

from collections.abc import Iterator
from typing import ClassVar

import nats
import pytest

from anarchon_conformance.suites import IdempotenceTests, SingleWinnerTests
from anarchon_test_support.nats_cluster import NATSCluster

from .test_conformance import MsgIdHarness

pytestmark = pytest.mark.processes


class ClusterHarness(MsgIdHarness):
    cluster_url: ClassVar[str | None] = None
    """The session cluster's URL, set by `_cluster_url` before each test."""
    options: ClassVar[dict[str, str]] = {**MsgIdHarness.options, "replicas": "3"}

    async def setup(self) -> None:
        if self.cluster_url is None:
            pytest.skip("no NATS cluster")
        self.base = self.cluster_url
        self.nc = await nats.connect(
            self.base.removeprefix("nats://").split(","), connect_timeout=2
        )
        self.js = self.nc.jetstream()
        self.streams = {f"C{self.run_id}"}

    @property
    def name(self) -> str:  # type: ignore[override]
        return "nats-cluster-msg-id"

    def url(self, address: tuple[str, int] | None = None, **extra: str) -> str:
        if address is not None:
            return super().url(address, **extra)
        query = {"strategy": self.strategy, "timeout_ms": "2s", **self.options, **extra}
        return f"{self.base}?" + "&".join(f"{k}={v}" for k, v in query.items())


@pytest.fixture(autouse=True)
def _cluster_url(nats_cluster: NATSCluster) -> Iterator[None]:
    ClusterHarness.cluster_url = nats_cluster.url
    yield
    ClusterHarness.cluster_url = None


class TestNATSClusterConformance(SingleWinnerTests, IdempotenceTests):
    harness_class = ClusterHarness

    async def test_C2_lost_reply_through_proxy(self) -> None:  # type: ignore[override]
        pytest.skip(
            "the kit's proxy fronts one server, and a cluster client learns the others from it "
            "and reconnects to them around the proxy; C2 after lost replies is checked on the "
            "single server (test_conformance.py) and under leader changes (test_cluster.py)"
        )
