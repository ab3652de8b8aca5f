"""One Redis server, killed (SIGKILL) and restarted on the same port and folder: the "server that
forgets" (issue #24). ``no-persistence``: the restarted server is empty, so every decided slot is
winnable again and claims racing across the restart can win twice. ``aof-always``: the server
fsyncs its append-only file before it answers, so it comes back with every claim it answered."""

from __future__ import annotations

import shutil
import subprocess
import tempfile
from collections.abc import Mapping
from typing import Any

from ._servers import free_port, start_process, stop_process

__all__ = ["RedisRestart"]


class RedisRestart:
    OPTIONS = ("no-persistence", "aof-always")

    def __init__(self, option: str) -> None:
        if option not in self.OPTIONS:
            raise ValueError(f"redis-restart: unknown option {option!r}; use one of {self.OPTIONS}")
        self.name = "redis-restart"
        self.option = option
        self.port = free_port()
        self.folder = tempfile.mkdtemp(prefix="anarchon-chaos-redis-")
        self.process: subprocess.Popen[bytes] | None = None

    def _args(self) -> list[str]:
        binary = shutil.which("redis-server")
        if binary is None:
            raise RuntimeError("redis-restart needs redis-server on PATH")
        args = [binary, "--port", str(self.port), "--bind", "127.0.0.1", "--dir", self.folder]
        args += ["--save", ""]
        if self.option == "aof-always":
            return [*args, "--appendonly", "yes", "--appendfsync", "always"]
        return [*args, "--appendonly", "no"]

    def start(self) -> None:
        self.process = start_process(self._args(), self.port)

    @property
    def url(self) -> str:
        return f"redis://127.0.0.1:{self.port}/0?prefix=chaos"

    @property
    def options(self) -> Mapping[str, Any]:
        return {}

    def fault(self, round: int) -> str:
        stop_process(self.process, kill=True)
        self.process = start_process(self._args(), self.port)
        return "kill -9 and restart the server"

    def stop(self) -> None:
        stop_process(self.process)
        shutil.rmtree(self.folder, ignore_errors=True)
