"""Private Redis-family servers for the tests (and the benchmarks): started on a free 127.0.0.1
port, without persistence, stopped at exit. Binaries come from ``scripts/redis-servers``
(``.cache/servers/``) or the environment variables below. A server started with `TLSFiles`
listens for TLS only. Test support: not part of the anarchon-redis wheel."""

from __future__ import annotations

import atexit
import os
import shutil
import socket
import ssl
import subprocess
import tempfile
import time
from pathlib import Path

import attrs

__all__ = [
    "BINARIES",
    "NoTLS",
    "PrivateServer",
    "TLSFiles",
    "find_binary",
    "missing_server_reason",
    "private_server",
    "private_server_url",
    "start",
    "start_tls_server",
    "stop_all",
]

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


@attrs.frozen(kw_only=True)
class TLSFiles:
    """PEM files of a TLS-only server: its certificate and key, and the CA it verifies client
    certificates with. `verify_clients` requires one (``tls-auth-clients yes``); the start-up
    probe then presents `client_cert_file`."""

    ca_file: str
    cert_file: str
    key_file: str
    verify_clients: bool = False
    client_cert_file: str | None = None
    client_key_file: str | None = None

    def args(self, port: int) -> list[str]:
        return [
            *("--port", "0", "--tls-port", str(port), "--tls-ca-cert-file", self.ca_file),
            *("--tls-cert-file", self.cert_file, "--tls-key-file", self.key_file),
            *("--tls-auth-clients", "yes" if self.verify_clients else "optional"),
        ]

    def probe_context(self) -> ssl.SSLContext:
        """How the start-up probe connects: the CA checked, the host name not (a test may serve
        a certificate for another host on purpose)."""
        context = ssl.create_default_context(cafile=self.ca_file)
        context.check_hostname = False
        if self.client_cert_file and self.client_key_file:
            context.load_cert_chain(self.client_cert_file, self.client_key_file)
        return context


class NoTLS(RuntimeError):
    """The binary was built without TLS."""


_NO_TLS = ("not supported", "not built", "not builtin", "bad directive")
"""What a build without TLS says when given ``--tls-port``."""


@attrs.define
class PrivateServer:
    binary: str
    port: int
    process: subprocess.Popen[bytes]
    directory: str
    tls: bool = False

    @property
    def url(self) -> str:
        return f"{'rediss' if self.tls else 'redis'}://127.0.0.1:{self.port}/0"

    def stop(self) -> None:
        if self.process.poll() is None:
            self.process.terminate()
            try:
                self.process.wait(10)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait()
        shutil.rmtree(self.directory, ignore_errors=True)


def _answers(port: int, context: ssl.SSLContext | None = None) -> bool:
    try:
        with socket.create_connection(("127.0.0.1", port), timeout=0.5) as plain:
            if context is None:
                plain.sendall(b"PING\r\n")
                return plain.recv(16).startswith(b"+PONG")
            with context.wrap_socket(plain, server_hostname="127.0.0.1") as sock:
                sock.sendall(b"PING\r\n")
                return sock.recv(16).startswith(b"+PONG")
    except OSError:
        return False


def _said(directory: str) -> str:
    """What the server wrote before it exited (config errors go to stderr, the rest to the log)."""
    lines: list[str] = []
    for name in ("stderr.log", "server.log"):
        path = Path(directory) / name
        if path.is_file():
            lines += path.read_text(errors="replace").strip().splitlines()[-5:]
    return " | ".join(line.strip() for line in lines if line.strip())


def start(binary: str, tls: TLSFiles | None = None) -> PrivateServer:
    """A server of `binary` on a free port (TLS only, with `tls`). `NoTLS` when the binary has
    no TLS; `RuntimeError`, with what the server said, when it does not start."""
    said = ""
    for _ in range(5):  # another process may take the free port first
        port = _free_port()
        directory = tempfile.mkdtemp(prefix="anarchon-redis-")
        args = [binary, *(tls.args(port) if tls else ["--port", str(port)]), "--bind", "127.0.0.1"]
        args += ["--save", "", "--appendonly", "no", "--dir", directory, "--daemonize", "no"]
        args += ["--logfile", "server.log"]
        with (Path(directory) / "stderr.log").open("wb") as stderr:
            process = subprocess.Popen(args, stdout=subprocess.DEVNULL, stderr=stderr)
        server = PrivateServer(binary, port, process, directory, tls=tls is not None)
        context = tls.probe_context() if tls else None
        deadline = time.monotonic() + 10
        while time.monotonic() < deadline and process.poll() is None:
            if _answers(port, context):
                return server
            time.sleep(0.05)
        if process.poll() is not None:
            said = _said(directory)
        server.stop()
        if tls and any(words in said.lower() for words in _NO_TLS):
            raise NoTLS(f"{binary} has no TLS (built without BUILD_TLS=yes): {said}")
    raise RuntimeError(f"{binary} did not start on a free port: {said or 'it said nothing'}")


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


def private_server_url(kind: str) -> str | None:
    """URL of a private server of `kind` (``redis86`` for idmp, ``valkey``), started on a free
    port on first use and stopped at exit; None when ``scripts/redis-servers`` has not installed
    its binary."""
    server = private_server(kind)
    return None if server is None else server.url


def missing_server_reason(kind: str) -> str:
    variable, relative = BINARIES[kind]
    return (
        f"{kind} server not installed: run scripts/redis-servers (installs .cache/servers/"
        f"{relative}) or set {variable}"
    )


def start_tls_server(tls: TLSFiles) -> PrivateServer:
    """A TLS-only private ``redis-server`` (the one on PATH, or ``ANARCHON_TEST_REDIS_SERVER``)
    with the certificates of `tls`; its `url` is ``rediss://127.0.0.1:<port>/0``. Stop it with
    ``server.stop()``. `NoTLS` when the binary was built without TLS, `FileNotFoundError` when
    there is none."""
    binary = find_binary("redis")
    if binary is None:
        raise FileNotFoundError("redis-server is not installed (or set ANARCHON_TEST_REDIS_SERVER)")
    return start(binary, tls)
