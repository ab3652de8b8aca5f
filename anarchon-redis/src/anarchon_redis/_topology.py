"""Where the store's Redis is: one server (``redis://``, ``rediss://``), a Redis Cluster
(``redis+cluster://``, ``rediss+cluster://``) or a primary found through Sentinel
(``redis+sentinel://``), and the redis-py client for each.

The URL forms:

* ``redis+cluster://[user:password@]host:port[,host2:port2...][/0]``: the startup nodes of a
  cluster, as redis-py's ``RedisCluster(startup_nodes=...)`` takes them (``RedisCluster.from_url``
  takes one node: so does this form, and discovers the others from it). A cluster has only
  database 0. Each job's keys share the hash tag ``{prefix:job}`` (`JobKeys`), so every claim
  script touches one hash slot, on one node.
* ``redis+sentinel://[user:password@]host:port[,host2:port2...]/<service>[/<db>]``: the
  sentinels (default port 26379) and the service name they monitor (``sentinel monitor
  <service> ...``), as ``Sentinel([...]).master_for(service)`` takes them: the form of
  Kombu/Celery's and redis-sentinel-url's ``sentinel://`` URLs. The URL's user and password
  are the primary's; sentinels that ask for their own are given ``sentinel_username`` and
  ``sentinel_password`` (options). After a failover the next connection asks the sentinels for
  the new primary.

A host list (``h1:port,h2:port``) needs a core that reads one (`StoreURL.hosts`); without it the
first host is the only startup node or sentinel, which is enough to find the others in a
cluster (a sentinel setup then depends on that one sentinel).
"""

from __future__ import annotations

from typing import Any, cast

import attrs
import redis.asyncio as aioredis
from redis.asyncio.cluster import ClusterNode, RedisCluster
from redis.asyncio.retry import Retry
from redis.asyncio.sentinel import Sentinel, SentinelConnectionPool
from redis.backoff import NoBackoff

from anarchon.backend import ConfigError, StoreURL

from ._options import RedisOptions

__all__ = ["CLUSTER_SCHEMES", "SCHEMES", "SENTINEL_SCHEMES", "Topology"]

CLUSTER_SCHEMES = ("redis+cluster", "rediss+cluster")
SENTINEL_SCHEMES = ("redis+sentinel",)
SCHEMES = ("redis", "rediss", *CLUSTER_SCHEMES, *SENTINEL_SCHEMES)
SENTINEL_PORT = 26379

MAX_CONNECTIONS = 32
"""Connections one store opens at most (per node in a cluster); further calls wait for one (up
to `timeout_ms`)."""


@attrs.frozen(kw_only=True)
class Topology:
    """What the URL names: `kind` is ``server``, ``cluster`` or ``sentinel``."""

    kind: str
    nodes: tuple[tuple[str, int], ...]
    """Startup nodes (cluster), sentinels (sentinel), or the one server."""
    service: str | None = None
    """sentinel: the monitored service (the primary's name in ``sentinel monitor``)."""
    db: int = 0
    tls: bool = False

    @classmethod
    def of(cls, url: StoreURL) -> Topology:
        """The topology `url` names, or a `ConfigError` saying how to write it."""
        scheme = url.scheme
        if scheme not in SCHEMES:
            raise ConfigError(
                f"Redis URL {url} must start with redis://, rediss:// (TLS), redis+cluster://, "
                "rediss+cluster:// or redis+sentinel://"
            )
        given: tuple[tuple[str | None, int | None], ...] = getattr(url, "hosts", ()) or (
            (url.host, url.port),
        )
        if scheme in SENTINEL_SCHEMES:
            return cls._sentinel(url, given)
        default_port = 6379
        nodes = tuple((host or "127.0.0.1", port or default_port) for host, port in given)
        if scheme in CLUSTER_SCHEMES:
            if url.path not in ("", "0"):
                raise ConfigError(
                    f"Redis URL {url}: a Redis Cluster has only database 0, the path says "
                    f"{url.path!r}: write redis+cluster://host:port (or /0), and give each "
                    "deployment its own prefix instead of a database"
                )
            return cls(kind="cluster", nodes=nodes, tls=scheme == "rediss+cluster")
        if url.path and not url.path.isdigit():
            raise ConfigError(
                f"Redis URL {url}: the path must be a database number such as /0, got {url.path!r}"
            )
        if len(nodes) > 1:
            raise ConfigError(
                f"Redis URL {url} names {len(nodes)} hosts: a redis:// URL is one server; "
                "for a cluster write redis+cluster://h1:port,h2:port, for Sentinel "
                "redis+sentinel://s1:26379,s2:26379/<service>"
            )
        return cls(kind="server", nodes=nodes, db=int(url.path or "0"), tls=scheme == "rediss")

    @classmethod
    def _sentinel(cls, url: StoreURL, given: tuple[tuple[str | None, int | None], ...]) -> Topology:
        service, _, db = url.path.partition("/")
        if not service or (db and not db.isdigit()) or "/" in db:
            raise ConfigError(
                f"Redis URL {url} names no service: write "
                "redis+sentinel://s1:26379,s2:26379/<service>/<db>, with the name the sentinels "
                "monitor (sentinel monitor <service> ...) and a database number (default 0)"
            )
        nodes = tuple((host or "127.0.0.1", port or SENTINEL_PORT) for host, port in given)
        return cls(kind="sentinel", nodes=nodes, service=service, db=int(db or "0"))


class BlockingSentinelPool(SentinelConnectionPool, aioredis.BlockingConnectionPool):
    """redis-py's Sentinel pool, blocking: a burst of claims waits for a free connection (up to
    `timeout_ms`) instead of failing with "Too many connections", as on one server."""


def _tls_kwargs(tls: bool, options: RedisOptions) -> dict[str, Any]:
    """redis-py's TLS arguments: the server's certificate is always verified (and its host
    name, redis-py's default), against `tls_ca_file` or the system's CAs."""
    if not tls:
        return {}
    return {
        "ssl_cert_reqs": "required",
        "ssl_ca_certs": options.tls_ca_file,
        "ssl_certfile": options.tls_cert_file,
        "ssl_keyfile": options.tls_key_file,
    }


def make_client(url: StoreURL, options: RedisOptions) -> aioredis.Redis:
    """A client for `url` without anarchon's query options. No automatic retries: a claim that
    fails on the wire is resent by the scheduler with the same token (C2), and renew / finish /
    release must not be applied twice behind the caller's back. A cluster's client is a
    ``RedisCluster`` (typed as the commands both share, see `Link.cluster`)."""
    topology = Topology.of(url)
    seconds = options.timeout_ms / 1000
    common: dict[str, Any] = {
        "socket_timeout": seconds,
        "socket_connect_timeout": seconds,
        "decode_responses": True,
        "client_name": "anarchon",
    }
    if topology.kind == "cluster":
        cluster = RedisCluster(
            startup_nodes=[ClusterNode(host, port) for host, port in topology.nodes],
            username=url.username,
            password=url.password,
            max_connections=2 * MAX_CONNECTIONS,  # claims take MAX_CONNECTIONS at most (`NodePool`)
            # One attempt and one more: the cluster client's loop retries after a MOVED (the
            # command did not run) but also after a lost connection (it may have run). Claims
            # do not go through it (`Link.pool_for`); renew, finish and release are safe to
            # repeat with their token (C2), and reads are.
            retry=Retry(NoBackoff(), 1),
            ssl=topology.tls,
            **_tls_kwargs(topology.tls, options),
            **common,
        )
        # The shared commands (get, evalsha, pipeline, scan_iter ...) have the same signatures.
        return cast("aioredis.Redis", cluster)
    if topology.kind == "sentinel":
        auth = (
            {}
            if options.sentinel_password is None
            else {"password": options.sentinel_password, "username": options.sentinel_username}
        )
        sentinel = Sentinel(  # type: ignore[no-untyped-call]
            list(topology.nodes),
            sentinel_kwargs={"socket_timeout": seconds, "socket_connect_timeout": seconds, **auth},
            **common,
        )
        primary: aioredis.Redis = sentinel.master_for(
            topology.service or "",
            username=url.username,
            password=url.password,
            db=topology.db,
            connection_pool_class=BlockingSentinelPool,
            max_connections=MAX_CONNECTIONS,
            timeout=seconds,
            retry=Retry(NoBackoff(), 0),
        )
        return primary
    # A blocking pool: a burst of claims (many jobs due in one slot) waits for a free connection
    # instead of failing with "Too many connections" past the pool's size.
    pool = aioredis.BlockingConnectionPool.from_url(
        url.without_query(),
        max_connections=MAX_CONNECTIONS,
        timeout=seconds,
        retry=Retry(NoBackoff(), 0),
        **_tls_kwargs(topology.tls, options),
        **common,
    )
    return aioredis.Redis.from_pool(pool)
