"""A server restart mid-run: the pool recovers and claims are resent with the same token (C2).

Restarting the machine's PostgreSQL would disturb everyone else, so this test starts a private
instance (initdb + pg_ctl) on a free port in a temporary directory, and restarts that one.
"""

from __future__ import annotations

import asyncio
import os
import shutil
import socket
import subprocess
import tempfile
from collections.abc import Iterator
from pathlib import Path

import pytest

from anarchon import ClaimRequest, Overlap, StoreUnavailable
from anarchon_postgres import PostgresStore, testing

BIN = Path(os.environ.get("ANARCHON_TEST_POSTGRES_BIN", "/usr/lib/postgresql/15/bin"))


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


class PrivateServer:
    def __init__(self, directory: Path, port: int) -> None:
        self.directory = directory
        self.data = directory / "data"
        self.port = port
        self.url = f"postgresql://postgres@127.0.0.1:{port}/postgres"
        self._as = ["runuser", "-u", "postgres", "--"] if os.geteuid() == 0 else []

    def _run(self, *args: str) -> None:
        subprocess.run([*self._as, *args], check=True, capture_output=True, timeout=120)

    def initdb(self) -> None:
        self._run(str(BIN / "initdb"), "-D", str(self.data), "-A", "trust", "-U", "postgres")

    def ctl(self, action: str, *extra: str) -> None:
        options = f"-p {self.port} -k {self.directory} -c listen_addresses=127.0.0.1"
        self._run(
            str(BIN / "pg_ctl"), "-D", str(self.data), "-o", options,
            "-l", str(self.directory / "log"), "-w", action, *extra,
        )  # fmt: skip


@pytest.fixture
def server() -> Iterator[PrivateServer]:
    if not (BIN / "initdb").exists():
        pytest.skip(f"initdb not found in {BIN}: set ANARCHON_TEST_POSTGRES_BIN")
    directory = Path(tempfile.mkdtemp(prefix="anarchon-pg-"))
    if os.geteuid() == 0:
        if shutil.which("runuser") is None:
            pytest.skip("running as root and runuser is missing: initdb refuses root")
        shutil.chown(directory, "postgres")
    srv = PrivateServer(directory, free_port())
    try:
        try:
            srv.initdb()
            srv.ctl("start")
        except (subprocess.CalledProcessError, LookupError) as exc:
            pytest.skip(f"cannot start a private PostgreSQL: {exc}")
        yield srv
    finally:
        try:
            srv.ctl("stop", "-m", "immediate")
        except subprocess.CalledProcessError:
            pass
        shutil.rmtree(directory, ignore_errors=True)


async def test_server_restart_mid_run_recovers_and_resends_the_same_token(
    server: PrivateServer,
) -> None:
    store = PostgresStore.create(server.url, pool_min_size=2, pool_max_size=3)
    await store.open()
    first = await store.now_ms() - 60_000
    outages = 0
    tokens: dict[int, str] = {}

    async def claim_until_answered(slot: int) -> None:
        nonlocal outages
        request = ClaimRequest(
            job="restart",
            slot=slot,
            instance="a",
            lease_ms=600_000,
            max_late_ms=3_600_000,
            overlap=Overlap.ALLOW,
        )
        for _ in range(200):
            try:
                claim = await store.claim(request)
            except StoreUnavailable:
                outages += 1
                await asyncio.sleep(0.1)
                continue
            assert claim.won and claim.token == request.token, (slot, claim)
            tokens[slot] = request.token
            return
        raise AssertionError(f"slot {slot} was never answered")

    for i in range(20):
        await claim_until_answered(first + i * 1000)
    await asyncio.to_thread(server.ctl, "restart", "-m", "fast")
    for i in range(20, 40):
        await claim_until_answered(first + i * 1000)
    restart = asyncio.ensure_future(asyncio.to_thread(server.ctl, "restart", "-m", "immediate"))
    for i in range(40, 60):  # claims while the server goes down and comes back
        await claim_until_answered(first + i * 1000)
    await restart
    for i in range(60, 70):
        await claim_until_answered(first + i * 1000)
    await store.close()
    for slot, token in tokens.items():
        run = testing.raw_run(server.url, "public", "anarchon_runs", "cron", "restart", slot)
        assert run is not None and run.token == token and run.attempt == 1, slot
    assert len(tokens) == 70
    print(f"{outages} claims failed with StoreUnavailable and were resent")
