"""A primary and a replica of our own, for the durability tests and the failover measurement:
two private ``redis-server`` processes on free loopback ports (`redis_servers.start`, no
persistence), the second a replica of the first. Stopped by whoever made them.

`Pair.pause_replica` stops the replica process (SIGSTOP): it stays connected but acknowledges
nothing, which is what a slow or partitioned replica looks like to ``WAIT``. `Pair.promote`
makes the replica a primary (``REPLICAOF NO ONE``), as Sentinel would after the primary died."""

from __future__ import annotations

import os
import signal
import socket
import time

from .redis_servers import PrivateServer, find_binary, start

__all__ = ["Pair", "command", "start_pair"]


def command(port: int, *words: str) -> bytes:
    """One command on a fresh connection: its raw reply (enough for the few we need)."""
    packed = f"*{len(words)}\r\n" + "".join(f"${len(w.encode())}\r\n{w}\r\n" for w in words)
    with socket.create_connection(("127.0.0.1", port), timeout=5) as sock:
        sock.sendall(packed.encode())
        reply = b""
        while not reply.endswith(b"\r\n"):
            chunk = sock.recv(65536)
            if not chunk:
                break
            reply += chunk
        return reply


class Pair:
    def __init__(self, primary: PrivateServer, replica: PrivateServer) -> None:
        self.primary = primary
        self.replica = replica
        self.paused = False

    def attach(self, timeout: float = 10.0) -> None:
        """Make the replica replicate the primary; back when its link is up."""
        command(self.primary.port, "CONFIG", "SET", "repl-diskless-sync-delay", "0")
        command(self.replica.port, "REPLICAOF", "127.0.0.1", str(self.primary.port))
        deadline = time.monotonic() + timeout
        while b"master_link_status:up" not in command(self.replica.port, "INFO", "replication"):
            if time.monotonic() > deadline:
                raise RuntimeError("the replica did not connect to the primary")
            time.sleep(0.02)
        listed = f"port={self.replica.port},state=online".encode()
        while listed not in command(self.primary.port, "INFO", "replication"):
            if time.monotonic() > deadline:
                raise RuntimeError("the primary does not list its replica")
            time.sleep(0.02)

    def pause_replica(self) -> None:
        os.kill(self.replica.process.pid, signal.SIGSTOP)
        self.paused = True

    def resume_replica(self) -> None:
        if self.paused:
            os.kill(self.replica.process.pid, signal.SIGCONT)
            self.paused = False

    def stop(self) -> None:
        self.resume_replica()
        self.replica.stop()
        self.primary.stop()


def start_pair() -> Pair | None:
    """A primary and its replica (the machine's ``redis-server``), or None without a binary."""
    binary = find_binary("redis")
    if binary is None:
        return None
    primary = start(binary)
    try:
        replica = start(binary)
    except BaseException:
        primary.stop()
        raise
    pair = Pair(primary, replica)
    try:
        pair.attach()
    except BaseException:
        pair.stop()
        raise
    return pair
