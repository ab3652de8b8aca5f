"""A Redis restart between claims: what the lease strategy remembers depends on persistence.

Without persistence the runs are gone after a restart, so a slot still within max_late can be
won a second time: the docs' Redis page says so and recommends AOF with ``appendfsync always``.
With it, the run survives the restart and the second instance sees it running.
"""

from __future__ import annotations

import shutil
import socket
import subprocess
import tempfile
import time
from collections.abc import Iterator

import pytest

import anarchon
from anarchon import ClaimRequest, LeaseStore, Outcome

BINARY = shutil.which("redis-server")
pytestmark = pytest.mark.skipif(BINARY is None, reason="redis-server is not installed")


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def answers(port: int) -> bool:
    try:
        with socket.create_connection(("127.0.0.1", port), timeout=0.5) as sock:
            sock.sendall(b"PING\r\n")
            return sock.recv(16).startswith(b"+PONG")
    except OSError:
        return False


class Server:
    def __init__(self, persistent: bool) -> None:
        self.port = free_port()
        self.directory = tempfile.mkdtemp(prefix="anarchon-redis-restart-")
        self.args = [str(BINARY), "--port", str(self.port), "--bind", "127.0.0.1"]
        self.args += ["--dir", self.directory, "--save", ""]
        self.args += (
            ["--appendonly", "yes", "--appendfsync", "always"]
            if persistent
            else [
                "--appendonly",
                "no",
            ]
        )
        self.process: subprocess.Popen[bytes] | None = None

    def start(self) -> None:
        self.process = subprocess.Popen(
            self.args, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL
        )
        deadline = time.monotonic() + 10
        while not answers(self.port):
            assert time.monotonic() < deadline, "redis-server did not start"
            assert self.process.poll() is None, "redis-server exited"
            time.sleep(0.02)

    def stop(self) -> None:
        if self.process is not None and self.process.poll() is None:
            self.process.terminate()
            self.process.wait(10)

    @property
    def url(self) -> str:
        return f"redis://127.0.0.1:{self.port}/0?prefix=restart"


@pytest.fixture(params=[False, True], ids=["no persistence", "aof always"])
def server(request: pytest.FixtureRequest) -> Iterator[Server]:
    server = Server(persistent=request.param)
    server.start()
    yield server
    server.stop()
    shutil.rmtree(server.directory, ignore_errors=True)


async def claim_once(url: str, request: ClaimRequest) -> Outcome:
    async with anarchon.connect(url) as store:
        assert isinstance(store, LeaseStore)
        return (await store.claim(request)).outcome


async def test_restart_between_claims(server: Server) -> None:
    async with anarchon.connect(server.url) as store:
        now = await store.now_ms()
    slot = now - now % 1000
    first = ClaimRequest(job="nightly", slot=slot, instance="a", max_late_ms=600_000)
    assert await claim_once(server.url, first) is Outcome.WON
    server.stop()
    server.start()
    second = ClaimRequest(job="nightly", slot=slot, instance="b", max_late_ms=600_000)
    outcome = await claim_once(server.url, second)
    persistent = "--appendfsync" in server.args
    if persistent:
        assert outcome is Outcome.RUNNING, "with AOF the run survives the restart"
    else:
        # The documented hazard: the restarted server forgot the run, so it is won again.
        assert outcome is Outcome.WON
