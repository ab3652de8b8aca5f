"""A PostgreSQL primary and two streaming replicas (``pg_basebackup -R``) on free loopback
ports. Each fault kills the primary (SIGKILL to the postmaster and every child, after cutting
its replication links: a crashed machine, nothing sent after it), promotes the replica that
received the most WAL (``pg_ctl promote``, as a failover manager picks), points the other replica
at it, and rebuilds the dead node as a new replica in the background (the next fault waits for
it). Clients follow through the multi-host URL
``postgresql://127.0.0.1:A,127.0.0.1:B,127.0.0.1:C/postgres?target_session_attrs=read-write``.

Each replica streams through a proxy that delivers the primary's bytes `LAG_S` after they were
sent (replicas a network hop away; on loopback alone they are microseconds behind and the window
this measures would hardly ever open). Options:

- ``async``: the default replication. A claim the primary acknowledged may not have reached a
  replica when the primary dies; the promoted replica lets a second claimant win that slot.
- ``sync``: ``synchronous_standby_names = 'ANY 1 (n0, n1, n2)'``, ``synchronous_commit = on``: the
  primary answers a claim only once a replica has flushed it, and the store is opened with
  ``durability=replicated`` (which checks those settings at open). The promoted replica, the one
  with the most WAL, has every claim that was answered. (``remote_apply`` waits longer and
  gives a failover nothing more: a promoted replica applies all the WAL it flushed.)

Servers run with ``fsync = off``: a SIGKILL is a process crash, and the operating system keeps
what the server wrote, so what the primary acknowledged is on its disk all the same; only
replication decides what the promoted replica knows. (With ``sync``, a standby's reported flush
is then a write into the operating system's cache; the primary still waits for that report
before it answers, and no standby's machine loses its cache here.)

Claims of one job take turns on the job's row lock, and with ``sync`` the winner holds it through
the replica's flush, so one race makes a few dozen claims a second; ``--jobs 16`` runs 16 races
at once on as many jobs (each slot still contested by every claimant), which is how the long
profile reaches 10^5 claims in minutes (`PostgresFailover.LONG_JOBS`: the long profile's default
here): ``python -m bench.chaos postgres-failover --option all --profile long``.
"""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import tempfile
import threading
import time
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

__all__ = ["BIN", "PostgresFailover", "ReplicatedPair"]

BIN = Path(os.environ.get("ANARCHON_TEST_POSTGRES_BIN", "/usr/lib/postgresql/15/bin"))
"""Where initdb, pg_ctl and pg_basebackup are."""

REPLICAS = 2
"""Standbys of the topology's primary (a three-node cluster)."""
LAG_S = 0.005
"""How long each replication link holds the primary's bytes before delivering them."""

_SYNC = {
    "async": (None, LAG_S),
    "sync": ("on", LAG_S),
}
"""option -> (synchronous_commit with a synchronous standby, or None: asynchronous; the lag)."""


class _Lag:
    """A proxy on the replication link that delivers each chunk the primary sends `delay_s`
    after it arrived (a constant latency, as a longer network path adds; the kit's
    `FaultProxy.delay_replies` holds chunks one after another, so its lag grows with the WAL
    rate), on an event loop in its own thread."""

    def __init__(self, target_port: int, delay_s: float) -> None:
        import asyncio
        import threading

        from anarchon_conformance.proxy import FaultProxy

        class Delayed(FaultProxy):
            async def _downstream(self, link: Any, reader: asyncio.StreamReader) -> None:
                loop = asyncio.get_running_loop()
                queue: asyncio.Queue[tuple[float, bytes]] = asyncio.Queue()

                async def deliver() -> None:
                    while True:
                        due, data = await queue.get()
                        await asyncio.sleep(max(due - loop.time(), 0))
                        if not data:  # the primary closed: all it sent is delivered
                            return
                        link.client.write(data)
                        await link.client.drain()

                writer = asyncio.create_task(deliver())
                try:
                    while data := await reader.read(65536):
                        queue.put_nowait((loop.time() + delay_s, data))
                    queue.put_nowait((loop.time() + delay_s, b""))
                    await writer
                except (OSError, asyncio.IncompleteReadError):
                    pass
                finally:
                    writer.cancel()
                    link.close()

        self.loop = asyncio.new_event_loop()
        self.thread = threading.Thread(target=self.loop.run_forever, daemon=True)
        self.thread.start()
        self.proxy = Delayed("127.0.0.1", target_port)
        asyncio.run_coroutine_threadsafe(self.proxy.start(), self.loop).result(10)
        self.port = self.proxy.port

    def retarget(self, port: int) -> None:
        """Forward new connections to `port` (the new primary) and accept them again."""
        import asyncio

        async def retarget() -> None:
            self.proxy.target = ("127.0.0.1", port)
            self.proxy.refuse(False)
            self.proxy.drop_all()

        asyncio.run_coroutine_threadsafe(retarget(), self.loop).result(10)

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
    """A PostgreSQL `primary` and `replicas` streaming standbys in their own folder, each standby
    through its own `_Lag` link (held `lag_s`; retargeted to the new primary after a failover).
    ``synchronous_commit`` None: asynchronous replication; else commits wait as that setting
    says for a synchronous standby (``synchronous_standby_names = 'ANY 1 (n0, n1, ...)'``, every
    node by name: with two replicas or more, one being rebuilt does not stop every commit)."""

    def __init__(
        self, synchronous_commit: str | None = None, lag_s: float = 0.0, replicas: int = 1
    ) -> None:
        self.folder = Path(tempfile.mkdtemp(prefix="anarchon-pg-pair-"))
        self._as: list[str] = []
        if os.geteuid() == 0:  # initdb refuses root
            shutil.chown(self.folder, "postgres")
            self._as = ["runuser", "-u", "postgres", "--"]
        self.synchronous_commit = synchronous_commit
        self.lag_s = lag_s
        self.primary = _Node(self.folder, "n0")
        self.standbys = [_Node(self.folder, f"n{i}") for i in range(1, replicas + 1)]
        self._links: dict[str, _Lag] = {}
        """standby name -> its link to the primary."""
        self._rejoin: threading.Thread | None = None
        self._rejoin_error: BaseException | None = None
        self._stopping = False

    @property
    def standby(self) -> _Node:
        """The first standby."""
        return self.standbys[0]

    @property
    def url(self) -> str:
        """The multi-host URL: every node, read-write sessions only."""
        hosts = ",".join(f"127.0.0.1:{n.port}" for n in [self.primary, *self.standbys])
        return f"postgresql://postgres@{hosts}/postgres?target_session_attrs=read-write"

    def _run(self, *args: str | Path, timeout: float = 120) -> None:
        subprocess.run(
            [*self._as, *map(str, args)], check=True, capture_output=True, timeout=timeout
        )

    def _settings(self) -> list[str]:
        settings = ["fsync=off", "wal_level=replica", "hot_standby=on", "max_wal_senders=10"]
        settings += ["wal_keep_size=256MB", "listen_addresses=127.0.0.1", "max_connections=300"]
        settings += ["wal_retrieve_retry_interval=100ms"]  # a retargeted standby reconnects soon
        if self.synchronous_commit is not None:
            # By name, never '*': pg_basebackup's WAL stream (rebuilding a node) would count as
            # a synchronous standby too, and a claim only it had flushed is on no replica.
            names = ", ".join(n.name for n in [self.primary, *self.standbys])
            settings += [
                f"synchronous_standby_names='ANY 1 ({names})'",
                f"synchronous_commit={self.synchronous_commit}",
            ]
        return settings

    def _ctl(self, node: _Node, *action: str) -> None:
        options = " ".join(f"-c {s}" for s in [f"port={node.port}", *self._settings()])
        options += f" -k {self.folder}"
        try:
            self._run(
                BIN / "pg_ctl", "-D", node.data, "-o", options, "-l", node.log, "-w", "-t", "60",
                *action,
            )  # fmt: skip
        except subprocess.CalledProcessError as exc:
            log = node.log.read_text(errors="replace") if node.log.exists() else ""
            raise RuntimeError(
                f"pg_ctl {' '.join(action)} of {node.name} failed: {exc.stderr!r}\n{log[-3000:]}"
            ) from exc

    def start(self) -> None:
        """Initialise and start the primary, then copy and start its standbys."""
        self._run(BIN / "initdb", "-D", self.primary.data, "-A", "trust", "-U", "postgres")
        self._ctl(self.primary, "start")
        # The copies at once: most of a start is pg_basebackup's checkpoint and copy.
        errors: list[Exception] = []

        def copy(standby: _Node) -> None:
            try:
                self._copy(standby, self.primary)
            except Exception as exc:  # noqa: BLE001 (raised below, in the caller's thread)
                errors.append(exc)

        copies = [threading.Thread(target=copy, args=(n,)) for n in self.standbys]
        for thread in copies:
            thread.start()
        for thread in copies:
            thread.join()
        if errors:
            raise errors[0]

    def _copy(self, node: _Node, source: _Node) -> None:
        """Make `node` a fresh standby of `source` (``pg_basebackup -R``), streaming through a
        new link, and start it. (Not ``pg_rewind``: the crashed primary's recovery recycles the
        WAL it would need.)"""
        shutil.rmtree(node.data, ignore_errors=True)
        self._run(
            BIN / "pg_basebackup", "-h", "127.0.0.1", "-p", str(source.port), "-U", "postgres",
            "-D", node.data, "-R", "-X", "stream", "-c", "fast",
        )  # fmt: skip
        old = self._links.pop(node.name, None)
        if old is not None:
            old.stop()
        link = self._links[node.name] = _Lag(source.port, self.lag_s)
        conninfo = f"host=127.0.0.1 port={link.port} user=postgres application_name={node.name}"
        with (node.data / "postgresql.auto.conf").open("a") as conf:
            conf.write(f"primary_conninfo = '{conninfo}'\n")
        if self._stopping:
            raise RuntimeError("the servers are stopping")
        self._ctl(node, "start")
        self._wait_streaming(source, node)

    def _wait_streaming(self, source: _Node, node: _Node, timeout_s: float = 60) -> None:
        """Return once `source` streams to `node` (``pg_stat_replication``), so that a synchronous
        primary has its standby before the first claim."""
        query = "SELECT count(*) FROM pg_stat_replication WHERE application_name = %s"
        query += " AND state = 'streaming'"
        deadline = time.monotonic() + timeout_s
        while True:
            row = _query(source, query, (node.name,))
            if row and row[0]:
                return
            if time.monotonic() >= deadline:
                raise TimeoutError(
                    f"the standby on :{node.port} does not stream from :{source.port}"
                )
            time.sleep(0.02)

    def kill_primary(self) -> None:
        """SIGKILL the primary's postmaster and every process it started, having cut every
        replication link first, with the bytes it held: a lagging replica loses those, as when
        the primary's machine dies."""
        for link in self._links.values():
            link.cut()
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
        # Wait for the children too: one still attached to the shared memory makes the next
        # start of this data directory fail ("pre-existing shared memory block is still in use").
        deadline = time.monotonic() + 10
        while any(_alive(p) for p in (pid, *children)) and time.monotonic() < deadline:
            time.sleep(0.01)

    def fail_over(self, *, wait: bool = True) -> None:
        """Kill the primary and promote the standby that received the most WAL (as a failover
        manager does); the other standbys follow it, and the dead node is rebuilt as its
        standby. Without `wait`, return once the standby is promoted and rebuild in a thread
        (`rejoined` waits for it; the next `fail_over` and `stop` do)."""
        self.rejoined()
        self.kill_primary()
        received = "SELECT pg_wal_lsn_diff(pg_last_wal_receive_lsn(), '0/0')"
        chosen = max(self.standbys, key=lambda n: float((_query(n, received) or (0,))[0] or 0))
        self._run(BIN / "pg_ctl", "-D", chosen.data, "-w", "-t", "60", "promote")
        dead = self.primary
        others = [n for n in self.standbys if n is not chosen]
        self.primary = chosen
        self.standbys = [*others, dead]
        del self._links[chosen.name]  # its link to the dead primary is cut already
        for node in others:
            self._links[node.name].retarget(chosen.port)
        (dead.data / "postmaster.pid").unlink(missing_ok=True)
        # And its socket's lock file, which names the killed postmaster too. Killed, it is a
        # zombie until the machine's init reaps it (0.6 to 2 s after the kill here, measured), and
        # a zombie's pid still answers kill(pid, 0): the rebuilt node's start then
        # failed with 'lock file ".s.PGSQL.<port>.lock" already exists'.
        for name in (f".s.PGSQL.{dead.port}", f".s.PGSQL.{dead.port}.lock"):
            (self.folder / name).unlink(missing_ok=True)
        self._rejoin = threading.Thread(target=self._rejoin_safely, args=(dead, others))
        self._rejoin.start()
        if wait:
            self.rejoined()

    def _rejoin_safely(self, dead: _Node, others: Sequence[_Node]) -> None:
        try:
            for node in others:  # on the new timeline, or rebuilt if it cannot follow
                try:
                    self._wait_streaming(self.primary, node, timeout_s=15)
                except TimeoutError:
                    self._run(BIN / "pg_ctl", "-D", node.data, "-m", "immediate", "stop")
                    self._copy(node, self.primary)
            self._copy(dead, self.primary)
        except Exception as exc:  # noqa: BLE001 (raised again by `rejoined`, in the caller's thread)
            self._rejoin_error = exc

    def rejoined(self) -> None:
        """Wait until every standby streams from the primary again after a `fail_over`."""
        if self._rejoin is not None:
            self._rejoin.join()
            self._rejoin = None
        error, self._rejoin_error = self._rejoin_error, None
        if error is not None:
            raise error

    def stop(self) -> None:
        """Stop every server, without waiting for a rebuild under way: its source is stopped
        first, so it fails at once, and whatever it started is stopped after it."""
        self._stopping = True
        self._stop_servers()
        if self._rejoin is not None:
            self._rejoin.join()
            self._rejoin = None
        self._rejoin_error = None  # a rebuild cut short by the stop
        self._stop_servers()
        for link in self._links.values():
            link.stop()
        self._links.clear()
        shutil.rmtree(self.folder, ignore_errors=True)

    def _stop_servers(self) -> None:
        for node in (self.primary, *self.standbys):
            if (node.data / "postmaster.pid").exists():
                try:
                    self._run(BIN / "pg_ctl", "-D", node.data, "-m", "immediate", "stop")
                except subprocess.CalledProcessError:
                    pass


def _query(node: _Node, query: str, params: tuple[Any, ...] = ()) -> tuple[Any, ...] | None:
    """One row of `query` on `node`, or None if it does not answer."""
    import psycopg

    try:
        url = f"postgresql://postgres@127.0.0.1:{node.port}/postgres?connect_timeout=3"
        with psycopg.connect(url, autocommit=True) as conn:
            return conn.execute(query, params).fetchone()  # type: ignore[arg-type]
    except psycopg.OperationalError:
        return None


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
    LONG_JOBS = 16
    """Races at once in the long profile (`bench.chaos.Profile.jobs`): claims of one job take
    turns on its row lock, held through a synchronous commit, so one race makes a few dozen
    claims a second with ``sync``; 16 make 10^5 in about four minutes here."""

    def __init__(self, option: str) -> None:
        if option not in _SYNC:
            raise ValueError(
                f"postgres-failover: unknown option {option!r}; use one of {self.OPTIONS}"
            )
        self.name = "postgres-failover"
        self.option = option
        self.pair = ReplicatedPair(*_SYNC[option], replicas=REPLICAS)

    def start(self) -> None:
        self.pair.start()

    @property
    def url(self) -> str:
        return f"{self.pair.url}&prefix=chaos"

    @property
    def options(self) -> Mapping[str, Any]:
        # A dead host answers at once (connection refused), so a short connect timeout only
        # bounds the case of a host that does not answer at all.
        # A pool as large as a worker's claims in flight with `--jobs` (jobs x tasks), within
        # the servers' max_connections for four workers.
        options: dict[str, Any] = {"connect_timeout": "3", "pool_min_size": 0, "pool_max_size": 60}
        if _SYNC[self.option][0] is not None:
            options["durability"] = "replicated"
        return options

    def fault(self, round: int) -> str:
        dead = self.pair.primary.port
        self.pair.fail_over(wait=False)
        return (
            f"killed the primary on :{dead}, promoted :{self.pair.primary.port}, rejoined :{dead}"
        )

    def stop(self) -> None:
        self.pair.stop()
