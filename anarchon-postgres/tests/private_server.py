"""A private PostgreSQL for the tests that restart a server or move its clock: initdb + pg_ctl
on a free loopback port in a temporary directory, stopped by the test that started it."""

from __future__ import annotations

import os
import shutil
import socket
import subprocess
import tempfile
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from pathlib import Path

import pytest

BIN = Path(os.environ.get("ANARCHON_TEST_POSTGRES_BIN", "/usr/lib/postgresql/15/bin"))


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


class PrivateServer:
    def __init__(self, directory: Path, port: int, env: Mapping[str, str]) -> None:
        self.directory = directory
        self.data = directory / "data"
        self.port = port
        self.url = f"postgresql://postgres@127.0.0.1:{port}/postgres"
        self._as = ["runuser", "-u", "postgres", "--"] if os.geteuid() == 0 else []
        self._env = [f"{k}={v}" for k, v in env.items()]

    def _run(self, *args: str) -> None:
        subprocess.run(
            [*self._as, "env", *self._env, *args], check=True, capture_output=True, timeout=120
        )

    def initdb(self) -> None:
        self._run(str(BIN / "initdb"), "-D", str(self.data), "-A", "trust", "-U", "postgres")

    def ctl(self, action: str, *extra: str) -> None:
        options = f"-p {self.port} -k {self.directory} -c listen_addresses=127.0.0.1"
        self._run(
            str(BIN / "pg_ctl"), "-D", str(self.data), "-o", options,
            "-l", str(self.directory / "log"), "-w", action, *extra,
        )  # fmt: skip


@contextmanager
def private_server(env: Mapping[str, str] | None = None) -> Iterator[PrivateServer]:
    """Start a private server (its processes get `env`: e.g. libfaketime); skip if impossible."""
    if not (BIN / "initdb").exists():
        pytest.skip(f"initdb not found in {BIN}: set ANARCHON_TEST_POSTGRES_BIN")
    directory = Path(tempfile.mkdtemp(prefix="anarchon-pg-"))
    if os.geteuid() == 0:
        if shutil.which("runuser") is None:
            pytest.skip("running as root and runuser is missing: initdb refuses root")
        shutil.chown(directory, "postgres")
    srv = PrivateServer(directory, free_port(), env or {})
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
