"""A three-node NATS JetStream cluster on loopback, the test's own (or a benchmark's).

Each node is a ``nats-server -js`` on free ports (client and cluster), with its own store
directory under `root`, routed to the others; the cluster is ready when every node answers on
its client port and reports a JetStream meta leader (checked by the caller with a client, as
this module imports no NATS driver). Nodes can be stopped, killed and started again on the same
ports and directories, so a restarted node catches up from its peers.

The binary is `NATS_SERVER` (``ANARCHON_TEST_NATS_SERVER``, default /usr/sbin/nats-server) unless
the cluster is given another (``NATSCluster(root, server=...)``, as the chaos harness's
``--nats-server`` does).
"""

from __future__ import annotations

import asyncio
import os
import signal
import socket
import subprocess
import time
from pathlib import Path

__all__ = ["NATS_SERVER", "NATSCluster", "NATSNode", "free_port"]

NATS_SERVER = os.environ.get("ANARCHON_TEST_NATS_SERVER", "/usr/sbin/nats-server")
CLUSTER_NAME = "anarchon"


def free_port() -> int:
    """A TCP port nothing listens on at the moment (127.0.0.1)."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


class NATSNode:
    """One server of the cluster: ``n<index>``, its client and route ports, its directory."""

    def __init__(self, root: Path, index: int, server: str = NATS_SERVER) -> None:
        self.name = f"n{index}"
        self.server = server
        self.root = root / self.name
        self.root.mkdir(parents=True, exist_ok=True)
        self.port = free_port()
        self.cluster_port = free_port()
        self.routes: list[int] = []
        self.proc: subprocess.Popen[bytes] | None = None

    @property
    def url(self) -> str:
        return f"nats://127.0.0.1:{self.port}"

    @property
    def running(self) -> bool:
        return self.proc is not None and self.proc.poll() is None

    def start(self) -> None:
        """Start the server (again) on its ports and directory; returns once it listens."""
        routes = ",".join(f"nats://127.0.0.1:{p}" for p in self.routes)
        command = [
            self.server,
            "-a",
            "127.0.0.1",
            "-p",
            str(self.port),
            "-js",
            "-sd",
            str(self.root / "js"),
            "--server_name",
            self.name,
            "--cluster_name",
            CLUSTER_NAME,
            "-cluster",
            f"nats://127.0.0.1:{self.cluster_port}",
            "-routes",
            routes,
        ]
        with (self.root / "server.log").open("ab") as log:
            self.proc = subprocess.Popen(command, stdout=log, stderr=subprocess.STDOUT)
        deadline = time.monotonic() + 15
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                raise RuntimeError(f"nats-server {self.name} exited; see {self.root}/server.log")
            try:
                with socket.create_connection(("127.0.0.1", self.port), timeout=0.2):
                    return
            except OSError:
                time.sleep(0.05)
        raise RuntimeError(f"nats-server {self.name} did not listen on port {self.port}")

    def stop(self, how: signal.Signals = signal.SIGTERM) -> None:
        """Stop the server with `how` (SIGKILL: no goodbye to its peers) and wait for it."""
        proc, self.proc = self.proc, None
        if proc is None:
            return
        if proc.poll() is None:
            proc.send_signal(how)
        try:
            proc.wait(10)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()


class NATSCluster:
    """`size` routed JetStream servers (default 3), each the binary `server`. `url` names them all
    (``nats://127.0.0.1:p1,127.0.0.1:p2,...``), so a client follows the cluster."""

    def __init__(self, root: Path, size: int = 3, server: str = NATS_SERVER) -> None:
        self.server = server
        self.nodes = [NATSNode(root, i + 1, server) for i in range(size)]
        for node in self.nodes:
            node.routes = [other.cluster_port for other in self.nodes if other is not node]

    @property
    def url(self) -> str:
        return "nats://" + ",".join(f"127.0.0.1:{node.port}" for node in self.nodes)

    def node(self, name: str) -> NATSNode:
        """The node called `name` (``n1`` ...), as JetStream names a stream's leader."""
        for node in self.nodes:
            if node.name == name:
                return node
        raise KeyError(name)

    def start(self) -> None:
        for node in self.nodes:
            node.start()

    def stop(self) -> None:
        for node in self.nodes:
            node.stop()

    def version(self) -> str:
        """What the binary says it is (``nats-server: v2.9.10``)."""
        answer = subprocess.run(
            [self.server, "--version"], capture_output=True, text=True, check=True, timeout=10
        )
        return answer.stdout.strip()

    async def wait_ready(self, deadline_s: float = 30) -> None:
        """Return once the cluster can place an R3 stream (every peer known to the meta
        leader): a stream created at once after `start` may otherwise be refused."""
        import nats  # anarchon-nats's client: only its tests and the chaos harness call this
        from nats.js.api import StreamConfig

        nc = await nats.connect([node.url for node in self.nodes], connect_timeout=2)
        try:
            js = nc.jetstream()
            until = time.monotonic() + deadline_s
            while True:
                try:
                    config = StreamConfig(name="READY", subjects=["ready"], num_replicas=3)
                    await js.add_stream(config)
                    await js.delete_stream("READY")
                    return
                except Exception:
                    if time.monotonic() > until:
                        raise
                    await asyncio.sleep(0.1)
        finally:
            await nc.close()
