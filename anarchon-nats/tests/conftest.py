"""Stores for the NATS tests: the shared server at ``ANARCHON_TEST_NATS_URL``, and private
``nats-server -js`` processes for the tests that restart a server or require a login.

Each test uses its own prefix (so its own stream), deleted afterwards with a raw nats-py client
that bypasses the code under test (`anarchon_nats.testing`).
"""

from __future__ import annotations

import asyncio
import os
import shutil
import socket
import subprocess
import time
import uuid
from collections.abc import AsyncIterator, Iterator
from pathlib import Path
from typing import Any

import nats
import pytest

from anarchon_nats import NATSStore, testing
from anarchon_test_support import mark_services
from anarchon_test_support.nats_cluster import NATSCluster

NATS_URL = os.environ.get("ANARCHON_TEST_NATS_URL", "nats://127.0.0.1:4222")
NATS_SERVER = os.environ.get("ANARCHON_TEST_NATS_SERVER", "/usr/sbin/nats-server")


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """Every test here needs a NATS server: ``pytest -m "not services"`` leaves them out."""
    mark_services(items, Path(__file__).parent)


def _server_error(url: str = NATS_URL) -> str | None:
    async def probe() -> None:
        nc = await nats.connect(url, connect_timeout=2, allow_reconnect=False)
        try:
            await nc.jetstream().account_info()
        finally:
            await nc.close()

    try:
        asyncio.run(probe())
    except Exception as exc:  # noqa: BLE001 - any failure means: skip with the reason
        return f"{type(exc).__name__}: {exc}"
    return None


_REASON = _server_error()


def require_server() -> None:
    if _REASON is not None:
        pytest.skip(
            f"NATS with JetStream at {NATS_URL} does not answer ({_REASON}); start it with "
            "scripts/services or set ANARCHON_TEST_NATS_URL"
        )


def require_binary() -> None:
    if not Path(NATS_SERVER).exists():
        pytest.skip(f"{NATS_SERVER} is not installed (set ANARCHON_TEST_NATS_SERVER)")


def new_prefix() -> str:
    return "t" + uuid.uuid4().hex[:12]


async def delete_stream(name: str, url: str = NATS_URL) -> None:
    nc = await nats.connect(url, connect_timeout=2, allow_reconnect=False)
    try:
        await testing.delete_stream(nc.jetstream(), name)
    finally:
        await nc.close()


@pytest.fixture
async def prefix() -> AsyncIterator[str]:
    """A fresh prefix; its stream (``ANARCHON_<prefix>``) is deleted after the test."""
    require_server()
    name = new_prefix()
    yield name
    await delete_stream(f"ANARCHON_{name}")
    await delete_stream(f"ANARCHON_{name}_MEMBERS")  # the member list (M1)


class StoreFactory:
    def __init__(self, prefix: str, url: str = NATS_URL) -> None:
        self.prefix = prefix
        self.url = url
        self.stores: list[NATSStore] = []

    async def __call__(self, **options: Any) -> NATSStore:
        options.setdefault("prefix", self.prefix)
        store = NATSStore.create(self.url, **options)
        await store.open()
        self.stores.append(store)
        return store

    async def close(self) -> None:
        for store in self.stores:
            await store.close()


@pytest.fixture
async def stores(prefix: str) -> AsyncIterator[StoreFactory]:
    """Open stores on the shared server under the test's prefix; closed after the test."""
    factory = StoreFactory(prefix)
    yield factory
    await factory.close()


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


class PrivateServer:
    """A ``nats-server -js`` of this test alone, on a free port, with its store in `root`."""

    def __init__(self, root: Path, *args: str) -> None:
        self.root = root
        self.port = free_port()
        self.args = args
        self.proc: subprocess.Popen[bytes] | None = None

    @property
    def url(self) -> str:
        return f"nats://127.0.0.1:{self.port}"

    def start(self) -> None:
        command = [NATS_SERVER, "-a", "127.0.0.1", "-p", str(self.port), "-js"]
        command += ["-sd", str(self.root / "js"), *self.args]
        with (self.root / "server.log").open("ab") as log:
            self.proc = subprocess.Popen(command, stdout=log, stderr=subprocess.STDOUT)
        deadline = time.monotonic() + 15
        while time.monotonic() < deadline:
            try:
                with socket.create_connection(("127.0.0.1", self.port), timeout=0.2):
                    return
            except OSError:
                time.sleep(0.05)
        raise RuntimeError(f"nats-server did not start on port {self.port}")

    def stop(self) -> None:
        if self.proc is not None:
            self.proc.terminate()
            try:
                self.proc.wait(10)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
            self.proc = None


@pytest.fixture
def private_server(tmp_path: Path) -> Iterator[PrivateServer]:
    require_binary()
    server = PrivateServer(tmp_path)
    server.start()
    yield server
    server.stop()
    shutil.rmtree(tmp_path / "js", ignore_errors=True)


@pytest.fixture(scope="session")
def nats_cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[NATSCluster]:
    """A three-node JetStream cluster of this test session (free loopback ports, own
    directories), shared by the cluster tests and stopped at the end. A test that stops a node
    starts it again (`NATSCluster` keeps its ports and directory)."""
    require_binary()
    root = tmp_path_factory.mktemp("nats-cluster")
    cluster = NATSCluster(root)
    try:
        cluster.start()
        asyncio.run(cluster.wait_ready())
        yield cluster
    finally:
        cluster.stop()  # its directory (the servers' logs) is pytest's to keep or remove
