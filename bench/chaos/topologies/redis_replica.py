"""A Redis primary and one replica, failed over again and again as a network fault followed by a
crash does it: the replica is cut off from the primary (its replication link goes through a
second `FaultProxy`, which drops the link and refuses it) for `CUT_OFF_S` while clients go on
claiming on the primary; then the primary is killed (SIGKILL), the replica promoted
(``REPLICAOF NO ONE``), the clients' forwarder (the kit's `FaultProxy`) pointed at it, dropping
every open connection as a Sentinel-aware client would reconnect, and the old primary started
again, empty, as the new primary's replica. Clients only ever see the forwarder's port.

Options: ``async`` (plain claims: what the primary answered ``won`` while its replica was cut off
is missing on the promoted replica, so those slots can be won a second time) and
``wait-replicas`` (``wait_replicas=1&wait_timeout=100ms``: ``won`` only once the replica
acknowledged the claim, see ``anarchon_redis._durability``; cut off, the claims answer
``unknown`` and are resent with the same token until the failover). Neither server persists
anything: only replication keeps a claim across a failover.
"""

from __future__ import annotations

import asyncio
import shutil
import socket
import subprocess
import tempfile
import threading
import time
from collections.abc import Mapping
from typing import Any

from anarchon_conformance.proxy import FaultProxy

from ._servers import free_port, start_process, stop_process

__all__ = ["CUT_OFF_S", "RedisReplica"]

CUT_OFF_S = 0.2
"""How long the replica is cut off from the primary before the primary is killed."""


def _command(port: int, *words: str) -> str:
    """One command in Redis's wire format on a fresh connection: the raw reply as text."""
    packed = f"*{len(words)}\r\n" + "".join(f"${len(w.encode())}\r\n{w}\r\n" for w in words)
    with socket.create_connection(("127.0.0.1", port), timeout=5) as sock:
        sock.sendall(packed.encode())
        reply = b""
        while not reply.endswith(b"\r\n"):
            chunk = sock.recv(65536)
            if not chunk:
                break
            reply += chunk
        return reply.decode(errors="replace")


class _Server:
    def __init__(self, binary: str) -> None:
        self.binary = binary
        self.port = free_port()
        self.folder = tempfile.mkdtemp(prefix="anarchon-chaos-replica-")
        self.process: subprocess.Popen[bytes] | None = None

    def start(self, replica_of: int | None = None) -> None:
        shutil.rmtree(self.folder, ignore_errors=True)  # a crash loses everything: no files
        self.folder = tempfile.mkdtemp(prefix="anarchon-chaos-replica-")
        args = [self.binary, "--port", str(self.port), "--bind", "127.0.0.1"]
        args += ["--dir", self.folder, "--save", "", "--appendonly", "no"]
        args += ["--repl-diskless-sync", "yes", "--repl-diskless-sync-delay", "0"]
        if replica_of is not None:
            args += ["--replicaof", "127.0.0.1", str(replica_of)]
        self.process = start_process(args, self.port)

    def kill(self) -> None:
        stop_process(self.process, kill=True)

    def stop(self) -> None:
        stop_process(self.process)
        shutil.rmtree(self.folder, ignore_errors=True)


class RedisReplica:
    OPTIONS = ("async", "wait-replicas")

    def __init__(self, option: str) -> None:
        if option not in self.OPTIONS:
            raise ValueError(f"redis-replica: unknown option {option!r}; use one of {self.OPTIONS}")
        binary = shutil.which("redis-server")
        if binary is None:
            raise RuntimeError("redis-replica needs redis-server on PATH")
        self.name = "redis-replica"
        self.option = option
        self.primary = _Server(binary)
        self.replica = _Server(binary)
        self.proxy: FaultProxy | None = None
        self.link: FaultProxy | None = None
        """The replication link: the replica connects to the primary through it."""
        self._loop = asyncio.new_event_loop()
        self._thread = threading.Thread(target=self._loop.run_forever, daemon=True)

    def _in_loop(self, coroutine: Any) -> Any:
        return asyncio.run_coroutine_threadsafe(coroutine, self._loop).result(30)

    def start(self) -> None:
        self._thread.start()
        self.primary.start()
        self.proxy = FaultProxy("127.0.0.1", self.primary.port)
        self._in_loop(self.proxy.start())
        self.link = FaultProxy("127.0.0.1", self.primary.port)
        self._in_loop(self.link.start())
        self.replica.start(replica_of=self.link.port)
        self._synced(self.replica, self.primary)

    def _synced(self, replica: _Server, primary: _Server, timeout_s: float = 30) -> None:
        deadline = time.monotonic() + timeout_s
        while "master_link_status:up" not in _command(replica.port, "INFO", "replication"):
            if time.monotonic() > deadline:
                raise TimeoutError("the replica did not sync with its primary")
            time.sleep(0.01)
        while "connected_slaves:1" not in _command(primary.port, "INFO", "replication"):
            if time.monotonic() > deadline:
                raise TimeoutError("the primary does not list its replica")
            time.sleep(0.01)

    @property
    def url(self) -> str:
        assert self.proxy is not None
        return f"redis://127.0.0.1:{self.proxy.port}/0?prefix=chaos"

    @property
    def options(self) -> Mapping[str, Any]:
        if self.option == "wait-replicas":
            return {"wait_replicas": 1, "wait_timeout": "100ms"}
        return {}

    def fault(self, round: int) -> str:
        assert self.proxy is not None and self.link is not None
        proxy, link = self.proxy, self.link

        async def cut_off() -> None:
            link.refuse(True)
            link.drop_all()

        self._in_loop(cut_off())
        time.sleep(CUT_OFF_S)  # the primary goes on answering claims its replica never sees
        self.primary.kill()
        _command(self.replica.port, "REPLICAOF", "NO", "ONE")
        promoted = self.replica.port

        async def fail_over() -> None:
            proxy.target = ("127.0.0.1", promoted)
            proxy.drop_all()
            link.target = ("127.0.0.1", promoted)
            link.refuse(False)

        self._in_loop(fail_over())
        self.primary, self.replica = self.replica, self.primary
        self.replica.start(replica_of=link.port)
        self._synced(self.replica, self.primary)
        return (
            f"cut the replica off for {CUT_OFF_S} s, kill -9 the primary, promote the replica, "
            "restart the old primary as its replica"
        )

    def stop(self) -> None:
        for proxy in (self.proxy, self.link):
            if proxy is not None:
                self._in_loop(proxy.stop())
        self._loop.call_soon_threadsafe(self._loop.stop)
        self._thread.join(5)
        self.primary.stop()
        self.replica.stop()
