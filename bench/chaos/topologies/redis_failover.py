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

Each cluster fault kills (SIGKILL) the primary that holds the race's job, then waits until
*every* live node reports the cut-off replica as a primary serving slots and the killed node as
serving none (the cluster's failover after ``cluster-node-timeout`` 1 s), and only then starts
the killed server again on its port and folder (its ``nodes.conf``, and the ``dump.rdb`` its last
full sync as a replica left there). The restarted node must come back as a replica of the
promoted one, in sync, and every node must report ``cluster_state:ok``, before the next fault;
otherwise the run fails rather than measure another fault. A node started again *before* the
failover still owns its slots (its configuration epoch is the newest), comes back as their
primary with the data of that old ``dump.rdb``, and its replica resynchronises from it and drops
everything it had acknowledged: a different fault (an operator or supervisor restarting a
crashed primary with persistence off, see docs/durability.md), which an earlier version of this
check let in now and then. Sentinel: the killed primary is started again once Sentinel names the
replica as primary, as a replica of it.

A claim the killed primary answered ``won`` and had not yet sent to its replica is lost with it:
that is what the duplicate-winner count measures."""

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


def _view(port: int) -> dict[int, dict[str, Any]] | None:
    """CLUSTER NODES as the node on `port` sees it, by port: each node's ``role`` (``("master",
    None)`` or ``("slave", <primary's port>)``), ``failed`` (flagged ``fail`` or ``fail?``),
    ``slots`` (how many ranges it serves) and ``epoch``. None when the node does not answer."""
    client = redis.Redis(host="127.0.0.1", port=port, decode_responses=True, socket_timeout=2)
    try:
        nodes: Any = client.execute_command("CLUSTER NODES")  # type: ignore[no-untyped-call]
    except (redis.RedisError, OSError):
        return None
    finally:
        client.close()
    ports = {
        node["node_id"]: int(addr.split("@")[0].rsplit(":", 1)[1]) for addr, node in nodes.items()
    }
    view: dict[int, dict[str, Any]] = {}
    for addr, node in nodes.items():
        flags = set(node["flags"].split(","))
        view[int(addr.split("@")[0].rsplit(":", 1)[1])] = {
            "role": ("master", None)
            if "master" in flags
            else ("slave", ports.get(node["master_id"])),
            "failed": bool(flags & {"fail", "fail?"}),
            "slots": len(node["slots"]),
            "epoch": int(node["epoch"]),
        }
    return view


def _serving(view: dict[int, dict[str, Any]], failed: bool = False) -> list[int]:
    """The primaries of `view` that serve slots: those not flagged failing (with `failed`: only
    those flagged failing)."""
    return sorted(
        port
        for port, node in view.items()
        if node["role"][0] == "master" and node["slots"] and node["failed"] == failed
    )


def _info(port: int) -> dict[str, Any] | None:
    client = redis.Redis(host="127.0.0.1", port=port, decode_responses=True, socket_timeout=2)
    try:
        info: dict[str, Any] = client.info("replication")
        return info
    except (redis.RedisError, OSError):
        return None
    finally:
        client.close()


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

    def _live(self) -> list[int]:
        return [s.port for s in self.cluster.servers if s.process.poll() is None]

    def _job_primary(self) -> int:
        """The live primary holding the race's job (``{chaos:chaos-<n>}``, not the probe's)."""
        deadline = time.monotonic() + 30
        while True:
            view = next((v for v in map(_view, self._live()) if v is not None), None)
            for port in [] if view is None else _serving(view):
                client = redis.Redis(host="127.0.0.1", port=port, decode_responses=True)
                try:
                    for key in client.scan_iter(match="{chaos:chaos-1*", count=1000):
                        if key.endswith(":runs"):
                            return port
                except (redis.RedisError, OSError):
                    pass
                finally:
                    client.close()
            if time.monotonic() > deadline:
                raise RuntimeError("no live primary holds the race's job")
            time.sleep(0.05)

    def _promoted(self, replica: int, killed: int) -> bool:
        """Every live node sees `replica` as a primary serving slots (no failure flag) and
        `killed` serving none: the failover is done and agreed, not just under way."""
        for port in self._live():
            view = _view(port)
            if view is None or replica not in _serving(view):
                return False
            if killed in _serving(view) or killed in _serving(view, failed=True):
                return False
        return True

    def _rejoined(self, port: int, primary: int) -> bool:
        """The node on `port` is a replica of `primary`, its link up, and every live node
        lists it as such."""
        info = _info(port)
        if info is None or info.get("role") != "slave" or info.get("master_port") != primary:
            return False
        if info.get("master_link_status") != "up":
            return False
        for other in self._live():
            view = _view(other)
            if view is None or port not in view or view[port]["role"] != ("slave", primary):
                return False
        return True

    def _synced(self) -> bool:
        """Every live node answers, and every replica's link to its primary is up."""
        for port in self._live():
            info = _info(port)
            if info is None:
                return False
            if info.get("role") == "slave" and info.get("master_link_status") != "up":
                return False
        return True

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
            "every live node seeing the replica promoted",
            lambda: self._promoted(replica.port, port),
        )
        epoch = _view(replica.port) or {}
        _restart(
            server,
            *("--cluster-enabled", "yes", "--cluster-config-file", "nodes.conf"),
            *("--cluster-node-timeout", "1000"),
        )
        _wait(
            "the restarted node a replica of the promoted one, in sync",
            lambda: self._rejoined(port, replica.port),
            seconds=60,
        )
        _wait("cluster_state:ok", self.cluster.healthy)
        _wait("every replica in sync", self._synced)
        return (
            f"cut the replica (:{replica.port}) off the job's primary (:{port}) for "
            f"{CUT_OFF_S} s, kill -9 the primary; its replica promoted (config epoch "
            f"{epoch.get(replica.port, {}).get('epoch', '?')}), seen so by every node; "
            "restarted, back as its replica"
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
