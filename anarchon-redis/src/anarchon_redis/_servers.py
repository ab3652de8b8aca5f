"""Private Redis-family servers for tests: started on a free 127.0.0.1 port, without
persistence, stopped at exit. Binaries come from ``scripts/redis-servers`` (``.cache/servers/``)
or the environment variables below."""

from __future__ import annotations

import atexit
import os
import shutil
import socket
import subprocess
import tempfile
import time
from pathlib import Path

import attrs

__all__ = ["BINARIES", "PrivateServer", "find_binary", "private_server", "stop_all"]

BINARIES = {
    "redis86": ("ANARCHON_TEST_REDIS86_SERVER", "redis-8.6/bin/redis-server"),
    "valkey": ("ANARCHON_TEST_VALKEY_SERVER", "valkey/bin/valkey-server"),
    "redis": ("ANARCHON_TEST_REDIS_SERVER", ""),
}
"""kind -> (environment variable naming the binary, its place under ``.cache/servers``)."""


def find_binary(kind: str) -> str | None:
    variable, relative = BINARIES[kind]
    given = os.environ.get(variable)
    if given:
        return given if os.access(given, os.X_OK) else None
    if not relative:
        return shutil.which("redis-server")
    for folder in (Path.cwd(), *Path.cwd().parents):
        candidate = folder / ".cache" / "servers" / relative
        if candidate.is_file() and os.access(candidate, os.X_OK):
            return str(candidate)
    return None


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


@attrs.define
class PrivateServer:
    binary: str
    port: int
    process: subprocess.Popen[bytes]
    directory: str

    @property
    def url(self) -> str:
        return f"redis://127.0.0.1:{self.port}/0"

    def stop(self) -> None:
        if self.process.poll() is None:
            self.process.terminate()
            try:
                self.process.wait(10)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait()
        shutil.rmtree(self.directory, ignore_errors=True)


def _answers(port: int) -> bool:
    try:
        with socket.create_connection(("127.0.0.1", port), timeout=0.5) as sock:
            sock.sendall(b"PING\r\n")
            return sock.recv(16).startswith(b"+PONG")
    except OSError:
        return False


def start(binary: str) -> PrivateServer:
    for _ in range(5):  # another process may take the free port first
        port = _free_port()
        directory = tempfile.mkdtemp(prefix="anarchon-redis-")
        args = [binary, "--port", str(port), "--bind", "127.0.0.1", "--save", "", "--appendonly"]
        args += ["no", "--dir", directory, "--daemonize", "no", "--logfile", "server.log"]
        process = subprocess.Popen(args, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        server = PrivateServer(binary, port, process, directory)
        deadline = time.monotonic() + 10
        while time.monotonic() < deadline and process.poll() is None:
            if _answers(port):
                return server
            time.sleep(0.05)
        server.stop()
    raise RuntimeError(f"{binary} did not start on a free port")


_servers: dict[str, PrivateServer | None] = {}


def private_server(kind: str) -> PrivateServer | None:
    """The process-wide server of `kind` (``redis86``, ``valkey``, ``redis``), started on first
    use; None when its binary is missing."""
    if kind not in _servers:
        binary = find_binary(kind)
        _servers[kind] = start(binary) if binary else None
    return _servers[kind]


@atexit.register
def stop_all() -> None:
    for server in _servers.values():
        if server is not None:
            server.stop()
    _servers.clear()
