"""The topologies the failover harness breaks, by name: ``python -m bench.chaos NAME``.

Each entry makes a `bench.chaos.Topology` for one option (the first option is the default).
A topology module starts its own servers on free 127.0.0.1 ports and stops them itself."""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence

from ..harness import Topology
from .nats_cluster import NATSClusterLeader
from .postgres_failover import PostgresFailover
from .redis_failover import RedisClusterFailover, RedisSentinelFailover
from .redis_replica import RedisReplica
from .redis_restart import RedisRestart

__all__ = ["TOPOLOGIES"]

TOPOLOGIES: Mapping[str, tuple[Sequence[str], Callable[..., Topology]]] = {
    "nats-cluster": (NATSClusterLeader.OPTIONS, NATSClusterLeader),
    "postgres-failover": (PostgresFailover.OPTIONS, PostgresFailover),
    "redis-cluster": (RedisClusterFailover.OPTIONS, RedisClusterFailover),
    "redis-replica": (RedisReplica.OPTIONS, RedisReplica),
    "redis-restart": (RedisRestart.OPTIONS, RedisRestart),
    "redis-sentinel": (RedisSentinelFailover.OPTIONS, RedisSentinelFailover),
}
"""name -> (its options, the default first; the factory of a topology for one option, and
keyword arguments of its own: ``nats-cluster`` takes ``server``, the nats-server binary)."""
