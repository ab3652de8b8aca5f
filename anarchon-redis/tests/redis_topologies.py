"""Local Redis topologies for the tests (and the failover runs): a Redis Cluster of 3 primaries
and 3 replicas, and a Sentinel setup (1 primary, 1 replica, 3 sentinels), each on free
127.0.0.1 ports with temp dirs of their own, without persistence, stopped by their owner (or at
exit). Built from the machine's ``redis-server`` (or ``ANARCHON_TEST_REDIS_SERVER``) and
``redis-cli``. Test support: not part of the anarchon-redis wheel."""

from __future__ import annotations

import atexit
import random
import shutil
import socket
import subprocess
import tempfile
import time
from pathlib import Path

import attrs
import redis

try:
    from .redis_servers import PrivateServer, find_binary
except ImportError:  # imported by path (bench/chaos): not as a package
    from redis_servers import PrivateServer, find_binary  # type: ignore[no-redef]

__all__ = ["LocalCluster", "LocalSentinel", "start_cluster", "start_sentinel"]

NODE_TIMEOUT_MS = 1000
"""cluster-node-timeout and Sentinel's down-after-milliseconds: how long a dead primary takes to
be noticed (failover then follows within about a second on loopback)."""


def _free(port: int) -> bool:
    with socket.socket() as sock:
        try:
            sock.bind(("127.0.0.1", port))
        except OSError:
            return False
    return True


def _free_ports(count: int, bus: bool = False) -> list[int]:
    """`count` free ports; with `bus`, ports whose cluster bus port (+10000) is free too (the
    kernel's ephemeral ports would put it past 65535)."""
    chosen: list[int] = []
    while len(chosen) < count:
        port = random.randrange(20000, 30000)
        if port not in chosen and _free(port) and (not bus or _free(port + 10000)):
            chosen.append(port)
    return chosen


def _ask(port: int, *words: str) -> str:
    """One inline command to 127.0.0.1:port; the reply's text ('' when nobody answers)."""
    try:
        with socket.create_connection(("127.0.0.1", port), timeout=1) as sock:
            sock.sendall((" ".join(words) + "\r\n").encode())
            sock.settimeout(1)
            data = b""
            while True:
                chunk = sock.recv(65536)
                data += chunk
                if not chunk or data.endswith(b"\r\n"):
                    break
            return data.decode(errors="replace")
    except OSError:
        return ""


def _spawn(binary: str, port: int, directory: str, *args: str) -> PrivateServer:
    command = [binary, *args, "--port", str(port), "--bind", "127.0.0.1", "--dir", directory]
    command += ["--save", "", "--appendonly", "no", "--daemonize", "no", "--logfile", "server.log"]
    process = subprocess.Popen(command, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    return PrivateServer(binary, port, process, directory)


def _wait(condition: str, check: object, seconds: float = 30) -> None:
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        if check():  # type: ignore[operator]
            return
        time.sleep(0.05)
    raise RuntimeError(f"local Redis topology: {condition} within {seconds} s")


def _binary() -> str:
    binary = find_binary("redis")
    if binary is None or shutil.which("redis-cli") is None:
        raise FileNotFoundError("redis-server and redis-cli are needed (apt install redis)")
    return binary


@attrs.define
class LocalCluster:
    """3 primaries + 3 replicas. `url` names every node (``redis+cluster://h:p,h:p...``);
    `seed_url` one node only (enough: the others are discovered)."""

    servers: list[PrivateServer]

    @property
    def ports(self) -> list[int]:
        return [server.port for server in self.servers]

    @property
    def seed_url(self) -> str:
        return f"redis+cluster://127.0.0.1:{self.servers[0].port}"

    @property
    def url(self) -> str:
        return "redis+cluster://" + ",".join(f"127.0.0.1:{port}" for port in self.ports)

    def primaries(self) -> list[int]:
        """Ports of the live primaries, from a live node's CLUSTER NODES."""
        for server in self.servers:
            if server.process.poll() is None:
                found = []
                for line in _ask(server.port, "CLUSTER", "NODES").splitlines():
                    words = line.split()
                    if len(words) < 8:
                        continue
                    flags = words[2].split(",")
                    if "master" in flags and not {"fail", "fail?"} & set(flags):
                        found.append(int(words[1].split("@")[0].rsplit(":", 1)[1]))
                return sorted(found)
        return []

    def server(self, port: int) -> PrivateServer:
        return next(server for server in self.servers if server.port == port)

    def healthy(self) -> bool:
        live = [s for s in self.servers if s.process.poll() is None]
        return all("cluster_state:ok" in _ask(s.port, "CLUSTER", "INFO") for s in live)

    def synced(self) -> bool:
        """Every live replica's link to its primary is up (a replica that never synced does not
        take over when its primary dies)."""
        for server in self.servers:
            if server.process.poll() is None:
                text = _ask(server.port, "INFO", "replication")
                if "role:slave" in text and "master_link_status:up" not in text:
                    return False
        return True

    def stop(self) -> None:
        for server in self.servers:
            server.stop()


def start_cluster() -> LocalCluster:
    """A cluster of 3 primaries and 3 replicas, every slot covered, state ok on every node, every
    replica in sync."""
    binary = _binary()
    servers = []
    for port in _free_ports(6, bus=True):
        directory = tempfile.mkdtemp(prefix="anarchon-cluster-")
        servers.append(
            _spawn(
                binary,
                port,
                directory,
                *("--cluster-enabled", "yes", "--cluster-config-file", "nodes.conf"),
                *("--cluster-node-timeout", str(NODE_TIMEOUT_MS)),
            )
        )
    cluster = LocalCluster(servers)
    _started.append(cluster)
    _wait("nodes answer", lambda: all(_ask(p, "PING").startswith("+PONG") for p in cluster.ports))
    subprocess.run(
        [
            "redis-cli",
            "--cluster",
            "create",
            *(f"127.0.0.1:{port}" for port in cluster.ports),
            *("--cluster-replicas", "1", "--cluster-yes"),
        ],
        check=True,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
        timeout=60,
    )
    _wait("cluster_state:ok on every node", cluster.healthy)
    _wait("3 primaries", lambda: len(cluster.primaries()) == 3)
    _wait("every replica in sync", cluster.synced)
    return cluster


@attrs.define
class LocalSentinel:
    """A primary, a replica and 3 sentinels monitoring them as `service`."""

    primary: PrivateServer
    replica: PrivateServer
    sentinels: list[PrivateServer]
    service: str = "anarchon"

    @property
    def url(self) -> str:
        hosts = ",".join(f"127.0.0.1:{s.port}" for s in self.sentinels)
        return f"redis+sentinel://{hosts}/{self.service}/0"

    @property
    def seed_url(self) -> str:
        return f"redis+sentinel://127.0.0.1:{self.sentinels[0].port}/{self.service}/0"

    def primary_port(self) -> int | None:
        """The primary's port as the first live sentinel reports it."""
        for sentinel in self.sentinels:
            if sentinel.process.poll() is None:
                text = _ask(sentinel.port, "SENTINEL", "get-master-addr-by-name", self.service)
                lines = text.split("\r\n")
                if len(lines) >= 5 and lines[4].isdigit():
                    return int(lines[4])
        return None

    def server(self, port: int) -> PrivateServer:
        return self.primary if self.primary.port == port else self.replica

    def replica_seen(self, port: int) -> bool:
        """Every live sentinel lists 127.0.0.1:`port` as a replica that is up and linked to its
        primary (a replica still marked down is not promoted)."""
        for sentinel in self.sentinels:
            if sentinel.process.poll() is None:
                client = redis.Redis(host="127.0.0.1", port=sentinel.port, socket_timeout=1)
                try:
                    replicas = client.sentinel_slaves(self.service)
                except (redis.RedisError, OSError):
                    return False
                finally:
                    client.close()
                mine = [r for r in replicas if int(r["port"]) == port]
                if not mine or mine[0]["is_sdown"] or mine[0].get("master-link-status") != "ok":
                    return False
        return True

    def stop(self) -> None:
        for server in (*self.sentinels, self.primary, self.replica):
            server.stop()


def start_sentinel() -> LocalSentinel:
    """Primary + replica + 3 sentinels (quorum 2), the replica in sync, every sentinel seeing
    the other two and the replica."""
    binary = _binary()
    ports = _free_ports(5)
    dirs = [tempfile.mkdtemp(prefix="anarchon-sentinel-") for _ in ports]
    primary = _spawn(binary, ports[0], dirs[0])
    replica = _spawn(binary, ports[1], dirs[1], "--replicaof", "127.0.0.1", str(ports[0]))
    sentinels = []
    for port, directory in zip(ports[2:], dirs[2:], strict=True):
        conf = Path(directory) / "sentinel.conf"
        conf.write_text(
            f"port {port}\nbind 127.0.0.1\ndir {directory}\nlogfile sentinel.log\n"
            f"sentinel monitor anarchon 127.0.0.1 {ports[0]} 2\n"
            f"sentinel down-after-milliseconds anarchon {NODE_TIMEOUT_MS}\n"
            "sentinel failover-timeout anarchon 2000\n"
            "sentinel parallel-syncs anarchon 1\n"
        )
        process = subprocess.Popen(
            [binary, str(conf), "--sentinel"],
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )
        sentinels.append(PrivateServer(binary, port, process, directory))
    setup = LocalSentinel(primary, replica, sentinels)
    _started.append(setup)
    _wait(
        "the replica in sync",
        lambda: "master_link_status:up" in _ask(ports[1], "INFO", "replication"),
    )

    def seen() -> bool:
        for sentinel in sentinels:
            text = _ask(sentinel.port, "SENTINEL", "master", "anarchon")
            words = text.split("\r\n")
            fields = dict(zip(words[2::4], words[4::4], strict=False))
            if fields.get("num-slaves") != "1" or fields.get("num-other-sentinels") != "2":
                return False
        return True

    _wait("3 sentinels seeing each other and the replica", seen)
    return setup


_started: list[LocalCluster | LocalSentinel] = []


@atexit.register
def _stop_all() -> None:
    for topology in _started:
        topology.stop()
    _started.clear()
