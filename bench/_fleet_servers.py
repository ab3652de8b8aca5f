"""Private servers for the fleet benchmark, and what each did: store operations and server CPU.

Each backend under test gets its own server on a free 127.0.0.1 port (a private
``redis-server``, an ``initdb`` cluster with ``pg_stat_statements``, a ``nats-server -js``), so
that its counters and its process CPU are the benchmark's alone, not the other engineers' on the
shared services. `Probe.snapshot` reads both; a run's cost is the difference of two snapshots.
SQLite has no server: its "server" is the claiming processes themselves (their CPU is measured
by the workers, `Probe` reports none).
"""

from __future__ import annotations

import json
import os
import shutil
import socket
import subprocess
import tempfile
import time
import urllib.request
from pathlib import Path
from typing import Any

__all__ = ["Probe", "Snapshot", "process_cpu_s", "start_probe"]

Snapshot = dict[str, float]
"""``ops`` (store operations the server counted) and ``cpu_s`` (its CPU seconds so far)."""

TICK = os.sysconf("SC_CLK_TCK")
PG_BIN = Path(os.environ.get("ANARCHON_TEST_POSTGRES_BIN", "/usr/lib/postgresql/15/bin"))


def process_cpu_s(pid: int) -> float:
    """CPU seconds (user + system, every thread) of process `pid` from /proc."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / TICK  # utime, stime


def _children(pid: int) -> list[int]:
    found = []
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                stat = (entry / "stat").read_text().rsplit(")", 1)[1].split()
            except OSError:
                continue
            if int(stat[1]) == pid:
                found.append(int(entry.name))
    return found


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def _wait_port(port: int, process: subprocess.Popen[bytes] | None, what: str) -> None:
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        if process is not None and process.poll() is not None:
            raise RuntimeError(f"{what} exited with {process.returncode} before it answered")
        try:
            with socket.create_connection(("127.0.0.1", port), timeout=0.5):
                return
        except OSError:
            time.sleep(0.05)
    raise RuntimeError(f"{what} did not answer on 127.0.0.1:{port} within 30 s")


class Probe:
    """One private server: its URL for the stores, `snapshot`, and `stop`."""

    url: str
    ops_meaning: str
    cpu_meaning: str

    def snapshot(self) -> Snapshot:
        raise NotImplementedError

    def reset(self) -> None:
        """Clear per-statement counters before a run (PostgreSQL); nothing elsewhere."""

    def stop(self) -> None:
        raise NotImplementedError


class RedisProbe(Probe):
    ops_meaning = "commands (INFO commandstats; those a script runs count too), INFO excluded"
    cpu_meaning = "redis-server CPU (INFO cpu: used_cpu_user + used_cpu_sys, every thread)"

    def __init__(self, binary: str) -> None:
        import redis

        from ._targets import redis_servers

        self.server = redis_servers().start(binary)
        self.url = self.server.url
        self._client = redis.Redis.from_url(self.url)

    def snapshot(self) -> Snapshot:
        stats: dict[str, Any] = self._client.info("commandstats")
        calls = sum(v["calls"] for k, v in stats.items() if k not in ("cmdstat_info",))
        cpu: dict[str, Any] = self._client.info("cpu")
        return {"ops": float(calls), "cpu_s": cpu["used_cpu_user"] + cpu["used_cpu_sys"]}

    def stop(self) -> None:
        self._client.close()
        self.server.stop()


class NATSProbe(Probe):
    ops_meaning = "messages received by the server (/varz in_msgs: publishes and API requests)"
    cpu_meaning = "nats-server process CPU (/proc)"

    def __init__(self) -> None:
        binary = shutil.which("nats-server")
        if binary is None:
            raise RuntimeError("nats-server is not on PATH")
        self.dir = tempfile.mkdtemp(prefix="anarchon-fleet-nats-")
        port, monitor = _free_port(), _free_port()
        args = [binary, "-js", "-a", "127.0.0.1", "-p", str(port), "-m", str(monitor)]
        args += ["-sd", self.dir]
        self.process = subprocess.Popen(args, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        _wait_port(port, self.process, "nats-server")
        _wait_port(monitor, self.process, "nats-server monitoring")
        self.url = f"nats://127.0.0.1:{port}"
        self._varz = f"http://127.0.0.1:{monitor}/varz"

    def snapshot(self) -> Snapshot:
        with urllib.request.urlopen(self._varz, timeout=10) as answer:
            varz = json.load(answer)
        return {"ops": float(varz["in_msgs"]), "cpu_s": process_cpu_s(self.process.pid)}

    def stop(self) -> None:
        self.process.terminate()
        try:
            self.process.wait(10)
        except subprocess.TimeoutExpired:
            self.process.kill()
            self.process.wait()
        shutil.rmtree(self.dir, ignore_errors=True)


class PostgresProbe(Probe):
    ops_meaning = "statements executed (pg_stat_statements calls), the probe's own excluded"
    cpu_meaning = "postmaster + its processes' CPU (/proc; a process that exits uncounted)"

    def __init__(self) -> None:
        if not (PG_BIN / "initdb").exists():
            raise RuntimeError(f"initdb not found in {PG_BIN}: set ANARCHON_TEST_POSTGRES_BIN")
        self.dir = Path(tempfile.mkdtemp(prefix="anarchon-fleet-pg-"))
        self._as = ["runuser", "-u", "postgres", "--"] if os.geteuid() == 0 else []
        if self._as:
            shutil.chown(self.dir, "postgres")
        self.port = _free_port()
        self.data = self.dir / "data"
        self._run(str(PG_BIN / "initdb"), "-D", str(self.data), "-A", "trust", "-U", "postgres")
        options = (
            f"-p {self.port} -k {self.dir} -c listen_addresses=127.0.0.1 "
            "-c shared_preload_libraries=pg_stat_statements -c max_connections=200 "
            "-c fsync=on -c synchronous_commit=on"
        )
        self._run(
            str(PG_BIN / "pg_ctl"), "-D", str(self.data), "-o", options,
            "-l", str(self.dir / "log"), "-w", "start",
        )  # fmt: skip
        self.url = f"postgresql://postgres@127.0.0.1:{self.port}/postgres"
        self.pid = int((self.data / "postmaster.pid").read_text().split()[0])
        import psycopg

        self._cpu: dict[int, float] = {}
        self._cpu_total = 0.0
        self._conn = psycopg.connect(self.url, autocommit=True)
        self._conn.execute("CREATE EXTENSION IF NOT EXISTS pg_stat_statements")

    def _run(self, *args: str) -> None:
        subprocess.run([*self._as, *args], check=True, capture_output=True, timeout=120)

    def reset(self) -> None:
        self._conn.execute("SELECT pg_stat_statements_reset()")

    def snapshot(self) -> Snapshot:
        row = self._conn.execute(
            "SELECT coalesce(sum(calls), 0) FROM pg_stat_statements "
            "WHERE query NOT LIKE '%pg_stat_statements%'"
        ).fetchone()
        # The CPU each process gained since the last snapshot (all of it for a new one): the
        # postmaster's cutime is no help, an exited backend is added there only once reaped.
        # A run's backends live from before its first snapshot to after its last.
        seen: dict[int, float] = {}
        for pid in [self.pid, *_children(self.pid)]:
            try:
                seen[pid] = process_cpu_s(pid)
            except OSError:  # it exited meanwhile
                continue
        self._cpu_total += sum(cpu - self._cpu.get(pid, 0.0) for pid, cpu in seen.items())
        self._cpu = seen
        return {"ops": float(row[0] if row else 0), "cpu_s": self._cpu_total}

    def stop(self) -> None:
        self._conn.close()
        try:
            self._run(str(PG_BIN / "pg_ctl"), "-D", str(self.data), "-m", "immediate", "stop")
        finally:
            shutil.rmtree(self.dir, ignore_errors=True)


class NoServer(Probe):
    ops_meaning = "store calls the instances made (no server to ask)"
    cpu_meaning = "the claiming processes' own CPU (SQLite runs in them)"

    def __init__(self, url: str) -> None:
        self.url = url

    def snapshot(self) -> Snapshot:
        return {"ops": 0.0, "cpu_s": 0.0}

    def stop(self) -> None:
        pass


def start_probe(backend: str, strategy: str, tmp: Path) -> Probe:
    """A private server for `backend` (``RuntimeError`` with the reason when impossible)."""
    if backend == "redis":
        from ._targets import redis_servers

        servers = redis_servers()
        kind = "redis86" if strategy == "idmp" else "redis"
        binary = servers.find_binary(kind)
        if binary is None:
            raise RuntimeError(servers.missing_server_reason(kind))
        return RedisProbe(binary)
    if backend == "postgres":
        return PostgresProbe()
    if backend == "nats":
        return NATSProbe()
    return NoServer(f"sqlite:///{tmp / 'fleet.db'}")
