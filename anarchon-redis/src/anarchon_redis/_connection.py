"""`Link`: what a store hands its strategy with each call instead of itself (the NATS backend's
shape too). The client while the store is open, and the URL that errors name. The store opens
and closes it; strategies only use it.

Claims are packed by hand and sent on a connection of `pool_for` the job's hash tag: the
client's pool on one server or the Sentinel's primary, the connections of the node serving the
tag's hash slot in a Redis Cluster (`_topology`). After a lost connection or a MOVED answer the
cluster's slot map is read again before the next claim (`stale`)."""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable, Sequence
from typing import Any, TypeVar, cast

import redis.asyncio as aioredis
import redis.exceptions as rex
from redis.asyncio.cluster import ClusterNode, RedisCluster

from anarchon.backend import StoreURL
from anarchon.plugins import plugin_manager

from ._client import ping, server_now_ms, translated
from ._durability import Confirm, check_cluster, check_server, confirm_for
from ._options import RedisOptions
from ._server import ServerWatch, judge, log, read_persistence
from ._topology import MAX_CONNECTIONS, Topology, make_client
from ._wire import Pool

__all__ = ["Link", "NodePool"]

T = TypeVar("T")


class NodePool:
    """The connections of one cluster node, as `_wire` takes a pool: at most `MAX_CONNECTIONS`
    claims at once per node and store, further ones wait for a free connection (up to
    `timeout_ms`), as they do on one server."""

    def __init__(self, node: ClusterNode, free: asyncio.Semaphore, timeout_s: float) -> None:
        self.node = node
        self._free = free
        self._timeout_s = timeout_s

    async def get_connection(self) -> Any:
        try:
            await asyncio.wait_for(self._free.acquire(), self._timeout_s)
        except TimeoutError:
            raise rex.ConnectionError(
                f"no free connection to cluster node {self.node.name} within {self._timeout_s} s"
            ) from None
        try:
            return self.node.acquire_connection()
        except BaseException:
            self._free.release()
            raise

    async def release(self, connection: Any) -> None:
        self.node.release(connection)
        self._free.release()


class Link:
    """The connection of one store to Redis. `name` is how "not open" errors name the store."""

    def __init__(self, url: StoreURL, options: RedisOptions, name: str) -> None:
        self.url = url
        self.options = options
        self.name = name
        self.topology = Topology.of(url)
        self._client: aioredis.Redis | None = None
        self._stale = False
        self._free: dict[str, asyncio.Semaphore] = {}
        """cluster: node name -> the claims that may use its connections at once."""
        self.read_only = False
        """Opened with `open_read_only` (R1): the store refuses claims and lease calls."""
        self.confirm: Confirm | None = confirm_for(options)
        """Durability options: what follows each deciding write (`_durability`)."""
        self.watch = ServerWatch(url, options)
        """The server's persistence and run id (`_server`)."""

    @property
    def client(self) -> aioredis.Redis:
        if self._client is None:
            raise RuntimeError(f"{self.name} is not open: await store.open() (or anarchon.connect)")
        return self._client

    @property
    def cluster(self) -> RedisCluster | None:
        """The client as a ``RedisCluster`` when the URL names a cluster, else None."""
        client = self.client
        return cast("RedisCluster", client) if self.topology.kind == "cluster" else None

    async def pool_for(self, key: str) -> Pool:
        """Where a command on `key` goes: the node that serves its hash slot in a cluster (the
        slot map read again first if `stale` was called), else the client's pool."""
        cluster = self.cluster
        if cluster is None:
            return cast("Pool", self.client.connection_pool)
        if self._stale:
            self._stale = False
            with translated(self.url):
                await cluster.nodes_manager.initialize()
        try:
            node = cluster.get_node_from_key(key)
        except rex.RedisClusterException as exc:  # a slot not covered: read the map again
            self._stale = True
            raise rex.ConnectionError(f"{exc}") from None
        if node is None:
            raise rex.ConnectionError(f"no node serves the hash slot of {key}")
        free = self._free.get(node.name)
        if free is None:
            free = self._free[node.name] = asyncio.Semaphore(MAX_CONNECTIONS)
        return NodePool(node, free, self.options.timeout_ms / 1000)

    async def pools_for(self, keys: Sequence[str]) -> list[tuple[Pool, list[int]]]:
        """`keys` grouped by where they go: each pool with the indexes of its keys, in order
        (one group on one server)."""
        cluster = self.cluster
        if cluster is None:
            return [(cast("Pool", self.client.connection_pool), list(range(len(keys))))]
        await self.pool_for(keys[0])  # reads the slot map again if stale
        groups: dict[str, tuple[Pool, list[int]]] = {}
        for i, key in enumerate(keys):
            pool = await self.pool_for(key)
            assert isinstance(pool, NodePool)
            groups.setdefault(pool.node.name, (pool, []))[1].append(i)
        return list(groups.values())

    async def routed(self, key: str, send: Callable[[Pool], Awaitable[T]]) -> T:
        """`send(pool)` on `pool_for(key)`. In a cluster, a MOVED answer (the command did not
        run: the slot has a new primary after a failover) reads the slot map again and sends
        once more; a lost connection marks the map `stale` and is raised (the caller's claim
        may have run: the scheduler resends it with its token, C2)."""
        for attempt in range(2):
            pool = await self.pool_for(key)
            try:
                return await send(pool)
            except rex.MovedError:
                await self.stale()
                if attempt:
                    raise
            except (rex.ConnectionError, rex.TimeoutError, OSError):
                await self.stale()
                raise
        raise AssertionError("unreachable")

    async def stale(self) -> None:
        """A cluster's slot map may be out of date (a lost connection, MOVED): read it again
        before the next claim. (A connection that failed was closed by redis-py already; the
        node's others may be in use by other claims and are left alone.)"""
        if self.topology.kind == "cluster":
            self._stale = True

    async def open(
        self, setup: Callable[[Link], Awaitable[None]], *, read_only: bool = False
    ) -> None:
        """Connect, check the server answers, and run `setup` (the strategy's: load its scripts,
        check the server supports it; for a `read_only` open, check the prefix holds its keys);
        closed again if that fails. Nothing when open already, except that an open after a
        read-only open runs `setup` and makes the store writable."""
        if self._client is not None:
            if self.read_only and not read_only:
                with translated(self.url):
                    await setup(self)
                self.read_only = False
            return
        client = make_client(self.url, self.options)
        cluster = self.topology.kind == "cluster"
        if not cluster:
            self._watch_connections(client)
        try:
            await ping(client, self.url)
            self._client = client
            with translated(self.url):
                await setup(self)
                if not read_only and not cluster:
                    # A cluster has one run id and one persistence setting per node: not
                    # checked (documented); its nodes' failovers are the cluster's own.
                    await self._check_server(client)
                elif not read_only and self.options.waits:
                    for text in await check_cluster(client, self.url, self.options):
                        log.warning("%s", text, extra={"store": str(self.url)})
            self.read_only = read_only
        except BaseException:
            self._client = None
            await _closed(client)
            raise

    def _watch_connections(self, client: aioredis.Redis) -> None:
        """Every new connection of `client` (a reconnect too) makes the run id due."""
        pool: Any = client.connection_pool
        make = pool.make_connection
        watch = self.watch

        def made() -> Any:
            connection = make()
            connection.register_connect_callback(watch.connected)
            return connection

        pool.make_connection = made

    async def _check_server(self, client: aioredis.Redis) -> None:
        """At open: persistence (warn, or refuse with ``require_persistence``), durability
        options the server can serve, and the run id that later reads compare with."""
        self.watch.persistence = found = await read_persistence(client)
        judge(self.url, self.options, found)
        if self.options.waits:
            for text in await check_server(client, self.url, self.options):
                log.warning("%s", text, extra={"store": str(self.url)})
        try:
            await self.watch.read(client)
        except rex.ResponseError as exc:  # NOPERM: an ACL without +info
            self.watch.every_s = float("inf")
            log.warning(
                "Redis at %s refused INFO server (%s): a restart of the server will not be "
                "noticed; grant the user +info",
                self.url,
                str(exc)[:120],
                extra={"store": str(self.url)},
            )

    async def watch_server(self) -> None:
        """Read the server's run id when due (every `restart_check_ms`, and after a failure):
        a restart is logged once and told to observers (`_server`). A failure here is left to
        the call that follows."""
        if self._client is None or not self.watch.due():
            return
        try:
            restarted = await self.watch.read(self._client)
        except (
            rex.RedisError,
            OSError,
        ):  # the claim that follows meets the same failure and reports it
            self.watch.failed()
            return
        if restarted is not None:
            plugin_manager().store_error(
                store=str(self.url), operation="server_restart", error=restarted
            )

    async def close(self) -> None:
        client, self._client = self._client, None
        self.read_only = False
        if client is not None:
            await _closed(client)

    async def now_ms(self) -> int:
        with translated(self.url):
            return await server_now_ms(self.client)


async def _closed(client: aioredis.Redis) -> None:
    """Close `client`, and for a Sentinel primary's client the sentinels' clients too (redis-py
    leaves those open)."""
    manager = getattr(getattr(client, "connection_pool", None), "sentinel_manager", None)
    await client.aclose()
    for sentinel in getattr(manager, "sentinels", ()):
        await sentinel.aclose()
