"""A PostgreSQL primary and a streaming replica (``pg_basebackup -R``) on two free loopback
ports; each fault kills the primary (SIGKILL to the postmaster and every child: a crashed
machine, nothing flushed or sent after it), promotes the replica (``pg_ctl promote``) and rebuilds
the dead node as the new primary's replica. Clients follow through the multi-host URL
``postgresql://127.0.0.1:A,127.0.0.1:B/postgres?target_session_attrs=read-write``.

The replica streams through a proxy that holds every byte from the primary for `LAG_S` (a
replica in another zone), except with ``async-loopback``. Options:

- ``async``: the default replication. A claim the primary acknowledged may not have reached the
  replica when the primary dies; the promoted replica lets a second claimant win that slot.
- ``async-loopback``: the same with no added lag (the replica a loopback hop away).
- ``sync``: ``synchronous_standby_names = '*'``, ``synchronous_commit = on``: the primary
  answers a claim only once the replica has flushed it, and the store is opened with
  ``durability=replicated`` (which checks those settings at open).
- ``sync-remote-apply``: the same with ``synchronous_commit = remote_apply``.

Servers run with ``fsync = off``: a SIGKILL is a process crash, and the operating system keeps
what the server wrote, so what the primary acknowledged is on its disk all the same; only
replication decides what the promoted replica knows.
"""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import tempfile
import time
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

__all__ = ["BIN", "PostgresFailover", "ReplicatedPair"]

BIN = Path(os.environ.get("ANARCHON_TEST_POSTGRES_BIN", "/usr/lib/postgresql/15/bin"))
"""Where initdb, pg_ctl and pg_basebackup are."""

LAG_S = 0.02
"""How long the replication link holds the primary's bytes (options other than async-loopback)."""

_SYNC = {
    "async": (None, LAG_S),
    "async-loopback": (None, 0.0),
    "sync": ("on", LAG_S),
    "sync-remote-apply": ("remote_apply", LAG_S),
}
"""option -> (synchronous_commit with a synchronous standby, or None: asynchronous; the lag)."""


class _Lag:
    """A `FaultProxy` (the kit's) delaying what the primary sends, on a loop in its own thread."""

    def __init__(self, target_port: int, delay_s: float) -> None:
        import asyncio
        import threading

        from anarchon_conformance.proxy import FaultProxy

        self.loop = asyncio.new_event_loop()
        self.thread = threading.Thread(target=self.loop.run_forever, daemon=True)
        self.thread.start()
        self.proxy = FaultProxy("127.0.0.1", target_port)
        asyncio.run_coroutine_threadsafe(self.proxy.start(), self.loop).result(10)
        self.proxy.delay_replies(delay_s)
        self.port = self.proxy.port

    def cut(self) -> None:
        """Drop the link and what it holds, and refuse the standby's reconnects: the primary's
        machine is gone, with the bytes it had sent but the standby had not received yet."""
        import asyncio

        async def cut() -> None:
            self.proxy.refuse()
            self.proxy.drop_all()

        asyncio.run_coroutine_threadsafe(cut(), self.loop).result(10)

    def stop(self) -> None:
        import asyncio

        asyncio.run_coroutine_threadsafe(self.proxy.stop(), self.loop).result(10)
        self.loop.call_soon_threadsafe(self.loop.stop)
        self.thread.join(10)
        self.loop.close()


def _free_port() -> int:
    import socket

    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


class _Node:
    def __init__(self, folder: Path, name: str) -> None:
        self.name = name
        self.data = folder / name
        self.port = _free_port()
        self.log = folder / f"{name}.log"


class ReplicatedPair:
    """Two PostgreSQL nodes in `folder`: `primary` and its streaming `standby`.
    ``synchronous_commit`` None: asynchronous replication; else the standby is synchronous
    (``synchronous_standby_names = '*'``) and commits wait as that setting says. With `lag_s`
    the standby streams through a proxy that holds the primary's bytes that long."""

    def __init__(self, synchronous_commit: str | None = None, lag_s: float = 0.0) -> None:
        self.folder = Path(tempfile.mkdtemp(prefix="anarchon-pg-pair-"))
        self._as: list[str] = []
        if os.geteuid() == 0:  # initdb refuses root
            shutil.chown(self.folder, "postgres")
            self._as = ["runuser", "-u", "postgres", "--"]
        self.synchronous_commit = synchronous_commit
        self.primary = _Node(self.folder, "a")
        self.standby = _Node(self.folder, "b")
        self.lag_s = lag_s
        self._lag: _Lag | None = None

    @property
    def url(self) -> str:
        """The multi-host URL: both nodes, read-write sessions only."""
        hosts = f"127.0.0.1:{self.primary.port},127.0.0.1:{self.standby.port}"
        return f"postgresql://postgres@{hosts}/postgres?target_session_attrs=read-write"

    def _run(self, *args: str | Path, timeout: float = 120) -> None:
        subprocess.run(
            [*self._as, *map(str, args)], check=True, capture_output=True, timeout=timeout
        )

    def _settings(self) -> list[str]:
        settings = ["fsync=off", "wal_level=replica", "hot_standby=on", "max_wal_senders=10"]
        settings += ["wal_keep_size=256MB", "listen_addresses=127.0.0.1"]
        if self.synchronous_commit is not None:
            settings += [
                "synchronous_standby_names='*'",
                f"synchronous_commit={self.synchronous_commit}",
            ]
        return settings

    def _ctl(self, node: _Node, *action: str) -> None:
        options = " ".join(f"-c {s}" for s in [f"port={node.port}", *self._settings()])
        options += f" -k {self.folder}"
        self._run(
            BIN / "pg_ctl", "-D", node.data, "-o", options, "-l", node.log, "-w", "-t", "60",
            *action,
        )  # fmt: skip

    def start(self) -> None:
        """Initialise and start the primary, then copy and start its standby."""
        self._run(BIN / "initdb", "-D", self.primary.data, "-A", "trust", "-U", "postgres")
        self._ctl(self.primary, "start")
        self._copy(self.standby, self.primary)

    def _copy(self, node: _Node, source: _Node) -> None:
        """Make `node` a fresh standby of `source` (``pg_basebackup -R``) and start it."""
        shutil.rmtree(node.data, ignore_errors=True)
        self._run(
            BIN / "pg_basebackup", "-h", "127.0.0.1", "-p", str(source.port), "-U", "postgres",
            "-D", node.data, "-R", "-X", "stream", "-c", "fast",
            "-d", f"application_name={node.name}",
        )  # fmt: skip
        if self._lag is not None:
            self._lag.stop()
            self._lag = None
        if self.lag_s:
            self._lag = _Lag(source.port, self.lag_s)
            conninfo = (
                f"host=127.0.0.1 port={self._lag.port} user=postgres application_name={node.name}"
            )
            with (node.data / "postgresql.auto.conf").open("a") as conf:
                conf.write(f"primary_conninfo = '{conninfo}'\n")
        self._ctl(node, "start")
        self._wait_streaming(source, node)

    def _wait_streaming(self, source: _Node, node: _Node, timeout_s: float = 60) -> None:
        """Return once `source` streams to `node` (``pg_stat_replication``), so that a synchronous
        primary has its standby before the first claim."""
        import psycopg

        query = "SELECT count(*) FROM pg_stat_replication WHERE application_name = %s"
        query += " AND state = 'streaming'"
        deadline = time.monotonic() + timeout_s
        url = f"postgresql://postgres@127.0.0.1:{source.port}/postgres"
        while True:
            with psycopg.connect(url, autocommit=True) as conn:
                row = conn.execute(query, (node.name,)).fetchone()
            if row and row[0]:
                return
            if time.monotonic() >= deadline:
                raise TimeoutError(
                    f"the standby on :{node.port} does not stream from :{source.port}"
                )
            time.sleep(0.02)

    def kill_primary(self) -> None:
        """SIGKILL the primary's postmaster and every process it started (and first cut the
        replication link, with what it held: a lagging replica loses that, as when the primary's
        machine dies)."""
        if self._lag is not None:
            self._lag.cut()
        pid = _postmaster_pid(self.primary.data)
        if pid is None:
            return
        children = _children(pid)
        os.kill(pid, signal.SIGKILL)
        for child in children:
            try:
                os.kill(child, signal.SIGKILL)
            except ProcessLookupError:
                pass
        deadline = time.monotonic() + 10
        while _alive(pid) and time.monotonic() < deadline:
            time.sleep(0.01)

    def fail_over(self) -> None:
        """Kill the primary, promote the standby, and rebuild the dead node as its standby."""
        self.kill_primary()
        self._run(BIN / "pg_ctl", "-D", self.standby.data, "-w", "-t", "60", "promote")
        dead = self.primary
        self.primary, self.standby = self.standby, dead
        (dead.data / "postmaster.pid").unlink(missing_ok=True)
        self._copy(dead, self.primary)

    def stop(self) -> None:
        if self._lag is not None:
            self._lag.stop()
            self._lag = None
        for node in (self.primary, self.standby):
            if (node.data / "postmaster.pid").exists():
                try:
                    self._run(BIN / "pg_ctl", "-D", node.data, "-m", "immediate", "stop")
                except subprocess.CalledProcessError:
                    pass
        shutil.rmtree(self.folder, ignore_errors=True)


def _postmaster_pid(data: Path) -> int | None:
    try:
        return int((data / "postmaster.pid").read_text().split("\n", 1)[0])
    except (OSError, ValueError):
        return None


def _children(pid: int) -> Sequence[int]:
    try:
        text = Path(f"/proc/{pid}/task/{pid}/children").read_text()
    except OSError:
        return ()
    return [int(p) for p in text.split()]


def _alive(pid: int) -> bool:
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return False
    return stat.rsplit(")", 1)[-1].split()[0] != "Z"


class PostgresFailover:
    """The harness's topology (`bench.chaos.Topology`) over a `ReplicatedPair`."""

    OPTIONS = tuple(_SYNC)

    def __init__(self, option: str) -> None:
        if option not in _SYNC:
            raise ValueError(
                f"postgres-failover: unknown option {option!r}; use one of {self.OPTIONS}"
            )
        self.name = "postgres-failover"
        self.option = option
        self.pair = ReplicatedPair(*_SYNC[option])

    def start(self) -> None:
        self.pair.start()

    @property
    def url(self) -> str:
        return f"{self.pair.url}&prefix=chaos"

    @property
    def options(self) -> Mapping[str, Any]:
        # A dead host answers at once (connection refused), so a short connect timeout only
        # bounds the case of a host that does not answer at all.
        options: dict[str, Any] = {"connect_timeout": "3", "pool_min_size": 0}
        if _SYNC[self.option][0] is not None:
            options["durability"] = "replicated"
        return options

    def fault(self, round: int) -> str:
        dead = self.pair.primary.port
        self.pair.fail_over()
        return f"killed the primary on :{dead}, promoted :{self.pair.primary.port}, rebuilt :{dead}"

    def stop(self) -> None:
        self.pair.stop()
