"""Redis Cluster and Sentinel with their primary killed: the local topologies of anarchon-redis's
tests (``redis_topologies.py``: a cluster of 3 primaries + 3 replicas; a primary, a replica and 3
sentinels), asynchronous replication as shipped (option ``async``); the cluster also with
``wait-replicas`` (``wait_replicas=1&wait_timeout=100ms``: a claim is ``won`` only once the
replica of the node that took it acknowledged it, `anarchon_redis._durability`).

On loopback a replica receives each write within microseconds, so a plain kill of the primary
loses almost nothing. The cluster's faults therefore first cut the replica off: it is stopped
(SIGSTOP) and the primary drops its replication link (``CLIENT KILL TYPE replica``), so the
writes of the next `CUT_OFF_S` stay in the primary's backlog; then the primary is killed and the
replica continued (SIGCONT). What it had received before the cut it keeps; what the primary
answered during the cut is lost with the primary, as in a network partition.

Each fault kills (SIGKILL) the primary that holds the race's job, waits until its replica is
promoted (cluster failover after ``cluster-node-timeout`` 1 s; Sentinel after
``down-after-milliseconds`` 1 s), and starts the killed server again on its port and folder as
a replica of the new primary, so the next fault finds a primary and a replica again. A claim the
killed primary answered ``won`` and had not yet sent to its replica is lost with it: that is
what the duplicate-winner count measures."""

from __future__ import annotations

import importlib
import os
import signal
import sys
import time
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import redis

__all__ = ["RedisClusterFailover", "RedisSentinelFailover"]

PREFIX = "chaos"
CUT_OFF_S = 0.2
"""How long the cluster's primary answers claims with its replica cut off before it dies."""


def _topologies() -> Any:
    """anarchon-redis's test launcher (test support, not in the wheel)."""
    tests = str(Path(__file__).resolve().parents[3] / "anarchon-redis" / "tests")
    if tests not in sys.path:
        sys.path.append(tests)
    return importlib.import_module("redis_topologies")


def _restart(server: Any, *args: str) -> None:
    """Start a killed server again on its port and folder (its nodes.conf, for a cluster node)."""
    launcher = _topologies()
    again = launcher._spawn(server.binary, server.port, server.directory, *args)
    server.process = again.process
    deadline = time.monotonic() + 20
    while not launcher._ask(server.port, "PING").startswith("+PONG"):
        if time.monotonic() > deadline:
            raise RuntimeError(f"restarted Redis on port {server.port} does not answer")
        time.sleep(0.05)


def _wait(what: str, check: Any, seconds: float = 30) -> None:
    deadline = time.monotonic() + seconds
    while not check():
        if time.monotonic() > deadline:
            raise RuntimeError(f"{what} within {seconds} s")
        time.sleep(0.05)


class RedisClusterFailover:
    OPTIONS = ("async", "wait-replicas")

    def __init__(self, option: str) -> None:
        if option not in self.OPTIONS:
            raise ValueError(f"redis-cluster: unknown option {option!r}; use {self.OPTIONS}")
        self.name = "redis-cluster"
        self.option = option
        self.cluster: Any = None

    def start(self) -> None:
        self.cluster = _topologies().start_cluster()

    @property
    def url(self) -> str:
        return f"{self.cluster.seed_url}?prefix={PREFIX}"

    @property
    def options(self) -> Mapping[str, Any]:
        if self.option == "wait-replicas":
            return {"wait_replicas": 1, "wait_timeout": "100ms"}
        return {}

    def _replica_of(self, port: int) -> Any:
        """The server replicating the primary on `port`."""
        client = redis.Redis(host="127.0.0.1", port=port, decode_responses=True)
        try:
            info: Any = client.info("replication")
        finally:
            client.close()
        return self.cluster.server(int(info["slave0"]["port"]))

    def _job_primary(self) -> int:
        """The live primary holding the race's job (``{chaos:chaos-<n>}``, not the probe's)."""
        for port in self.cluster.primaries():
            client = redis.Redis(host="127.0.0.1", port=port, decode_responses=True)
            try:
                for key in client.scan_iter(match="{chaos:chaos-1*", count=1000):
                    if key.endswith(":runs"):
                        return int(port)
            finally:
                client.close()
        return int(self.cluster.primaries()[0])

    def fault(self, round: int) -> str:
        port = self._job_primary()
        server = self.cluster.server(port)
        replica = self._replica_of(port)
        os.kill(replica.process.pid, signal.SIGSTOP)
        try:
            primary = redis.Redis(host="127.0.0.1", port=port)
            try:
                primary.execute_command("CLIENT", "KILL", "TYPE", "replica")
            finally:
                primary.close()
            time.sleep(CUT_OFF_S)  # the primary answers claims its replica never gets
            server.process.kill()
            server.process.wait()
        finally:
            os.kill(replica.process.pid, signal.SIGCONT)
        _wait(
            "a replica promoted",
            lambda: len(self.cluster.primaries()) == 3 and port not in self.cluster.primaries(),
        )
        _restart(
            server,
            *("--cluster-enabled", "yes", "--cluster-config-file", "nodes.conf"),
            *("--cluster-node-timeout", "1000"),
        )
        _wait("cluster_state:ok", self.cluster.healthy)
        _wait("the restarted node in sync as a replica", self.cluster.synced)
        return (
            f"cut the replica (:{replica.port}) off the job's primary (:{port}) for "
            f"{CUT_OFF_S} s, kill -9 the primary; its replica promoted; restarted as a replica"
        )

    def stop(self) -> None:
        if self.cluster is not None:
            self.cluster.stop()


class RedisSentinelFailover:
    OPTIONS = ("async",)

    def __init__(self, option: str) -> None:
        if option not in self.OPTIONS:
            raise ValueError(f"redis-sentinel: unknown option {option!r}; use {self.OPTIONS}")
        self.name = "redis-sentinel"
        self.option = option
        self.setup: Any = None

    def start(self) -> None:
        self.setup = _topologies().start_sentinel()

    @property
    def url(self) -> str:
        return f"{self.setup.seed_url}?prefix={PREFIX}"

    @property
    def options(self) -> Mapping[str, Any]:
        return {}

    def fault(self, round: int) -> str:
        port = self.setup.primary_port()
        server = self.setup.server(port)
        server.process.kill()
        server.process.wait()
        _wait(
            "Sentinel promoted the replica", lambda: self.setup.primary_port() not in (port, None)
        )
        new = self.setup.primary_port()
        _restart(server, "--replicaof", "127.0.0.1", str(new))
        launcher = _topologies()
        _wait(
            "the old primary in sync as a replica",
            lambda: "master_link_status:up" in launcher._ask(port, "INFO", "replication"),
        )
        _wait("every sentinel sees the replica up", lambda: self.setup.replica_seen(port))
        return f"kill -9 the primary (:{port}); Sentinel promoted :{new}; restarted as a replica"

    def stop(self) -> None:
        if self.setup is not None:
            self.setup.stop()
