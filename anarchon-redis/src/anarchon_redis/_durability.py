"""Durability options (``wait_replicas``, ``wait_timeout``, ``wait_aof``): a claim is answered
``won`` only once replicas (or the append-only files) hold it.

Each write that decides a claim is followed, on the same connection and in the same round trip,
by two commands: ``SET {prefix:job}:ack 1 PX 1000`` and ``WAIT <replicas> <timeout>`` (or
``WAITAOF 1 <replicas> <timeout>``). ``WAIT`` waits for the replication offset of the client's
last *write*, and a claim that Redis decides without writing (a resend whose token the store
recognises, C2; an answer ``running``) leaves that offset where an older command of the
connection put it. The ``SET`` always writes, after the claim, on the same server: so a confirmed
``WAIT`` means the replicas hold everything the primary had when the claim was decided,
including the claim, whichever connection decided it first.

A ``won`` that is not confirmed in time answers ``unknown`` (C3): the primary may hold it and
lose it in a failover. ``running``, ``done``, ``lost``, ``late`` and ``skipped`` answers stand: they
run nothing. Renew, finish and release raise `StoreUnavailable` when not confirmed: the
runtime resends finish and release with the same token (C2), and a renew that is not confirmed
counts as failed, so the runner fences itself (F1) by the last lease the replicas hold.

In a Redis Cluster each job's keys (its ack key too) share one hash slot, so the commands go to
the node that serves the job, on the connection that carried the claim (one ``WAIT`` per node
for a batch: `anarchon_redis._strategies.scripted`), and ``WAIT`` counts that node's replicas.
A redirect (``MOVED``, ``TRYAGAIN``, ``CLUSTERDOWN``) answering the ack write means the slot left
the node meanwhile: the write is not confirmed.

``WAIT`` is not consensus: with two replicas and ``wait_replicas=1``, the replica that was
promoted may be the one that had not acknowledged. Only ``wait_replicas`` equal to the number
of replicas that a failover may promote closes that (see docs/backends/redis.md).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import redis.exceptions as rex

from anarchon.backend import Claim, ConfigError, Outcome, StoreUnavailable, StoreURL

from . import _wire as wire
from ._options import RedisOptions

__all__ = ["Confirm", "check_cluster", "check_server", "confirm_for"]

REDIRECTS = (rex.AskError, rex.TryAgainError, rex.ClusterDownError)
"""Cluster answers to the ack write that mean another node serves the slot now (MOVED is an
`AskError`)."""

ACK_PX = "1000"
"""How long an ack key lives (ms): it only has to reach the replication stream."""


class Confirm:
    """The commands that follow a deciding write, and how their replies are read."""

    count = 2
    """Commands `packed` adds (their replies follow the write's)."""

    def __init__(self, options: RedisOptions) -> None:
        self.replicas = options.wait_replicas or 0
        self.aof = options.wait_aof
        self.timeout_ms = options.confirm_timeout_ms
        words = (
            ["WAITAOF", "1", str(self.replicas), str(self.timeout_ms)]
            if self.aof
            else ["WAIT", str(self.replicas), str(self.timeout_ms)]
        )
        self.wait = wire.command(words)
        self.unconfirmed = 0
        """Writes whose confirmation fell short since the store opened."""

    def __repr__(self) -> str:
        what = f"WAITAOF 1 {self.replicas}" if self.aof else f"WAIT {self.replicas}"
        return f"Confirm({what}, {self.timeout_ms} ms)"

    def commands(self, ack_key: str) -> list[bytes]:
        """``SET <ack_key> 1 PX 1000`` and the wait, packed, to send right after a write."""
        return [wire.command(["SET", ack_key, "1", "PX", ACK_PX]), self.wait]

    def packed(self, ack_key: str) -> bytes:
        """`commands` as one piece of bytes."""
        return b"".join(self.commands(ack_key))

    def shortfall(self, url: StoreURL, replies: Sequence[Any]) -> str | None:
        """None when the replies of `packed` confirm the write; else what fell short. An error
        reply (``WAITAOF`` with the AOF turned off since open) is raised."""
        ack, waited = replies
        for reply in (ack, waited):
            if isinstance(reply, REDIRECTS):
                self.unconfirmed += 1
                return f"the node no longer serves the job's hash slot ({str(reply)[:80]})"
            if isinstance(reply, rex.ResponseError):
                raise _refused(url, reply)
        if self.aof:
            local, replicas = (int(n) for n in waited)
            if local >= 1 and replicas >= self.replicas:
                return None
            self.unconfirmed += 1
            return (
                f"WAITAOF answered local={local}, replicas={replicas} within "
                f"{self.timeout_ms} ms (wanted local=1, replicas={self.replicas})"
            )
        got = int(waited)
        if got >= self.replicas:
            return None
        self.unconfirmed += 1
        return (
            f"{got} of {self.replicas} replica(s) acknowledged the write within "
            f"{self.timeout_ms} ms (wait_replicas, wait_timeout)"
        )

    def claim(self, claim: Claim, shortfall: str | None) -> Claim:
        """`claim`, or ``unknown`` (C3) for a ``won`` whose write was not confirmed."""
        if shortfall is None or not claim.won:
            return claim
        return Claim(
            outcome=Outcome.UNKNOWN,
            attempt=claim.attempt,
            token=claim.token,
            holder=claim.holder,
            lease_until=claim.lease_until,
            reason=f"unconfirmed: {shortfall}; resend with the same token to learn the answer",
        )

    def write(self, url: StoreURL, what: str, shortfall: str | None) -> None:
        """Raise `StoreUnavailable` when a renew, finish or release was not confirmed."""
        if shortfall is not None:
            raise StoreUnavailable(
                f"Redis at {url}: {what} not confirmed: {shortfall}; it may be resent"
            )


def _refused(url: StoreURL, exc: rex.ResponseError) -> Exception:
    text = str(exc)
    if "appendonly" in text.lower():
        return ConfigError(
            f"Redis at {url} refused WAITAOF ({text}): wait_aof=true needs appendonly yes on the "
            "primary (CONFIG SET appendonly yes), or remove wait_aof"
        )
    return exc


async def check_server(client: Any, url: StoreURL, options: RedisOptions) -> list[str]:
    """At open, with durability options: `ConfigError` when the server cannot wait as asked
    (no WAITAOF before Redis 7.2; ``appendonly no`` with `wait_aof`); warnings (returned) when
    fewer replicas are connected than `wait_replicas` (every claim would answer ``unknown``)."""
    warnings: list[str] = []
    info: dict[str, Any] = await client.info("replication")
    if options.wait_aof:
        try:  # older servers answer a nil entry, which redis-py's parser cannot read
            found = await client.execute_command("COMMAND", "INFO", "WAITAOF")
        except TypeError:
            found = None
        if not found:
            raise ConfigError(
                f"Redis at {url} has no WAITAOF (Redis 7.2+, Valkey 8): remove wait_aof, or use "
                "wait_replicas alone (WAIT)"
            )
        aof = await _appendonly(client)
        if aof is False:
            raise ConfigError(
                f"Redis at {url} has appendonly no: wait_aof=true needs appendonly yes on the "
                "primary (CONFIG SET appendonly yes), or remove wait_aof"
            )
    if info.get("role") not in (None, "master"):
        warnings.append(
            f"Redis at {url} is a replica (role {info.get('role')}); claims need the primary"
        )
    connected = int(info.get("connected_slaves", 0) or 0)
    wanted = options.wait_replicas or 0
    if connected < wanted:
        warnings.append(
            f"Redis at {url} has {connected} replica(s) connected and wait_replicas={wanted}: "
            "until enough connect, every claim answers unknown (nobody runs the job)"
        )
    return warnings


class _Node:
    """One node of a cluster client, with the few commands `check_server` sends."""

    def __init__(self, cluster: Any, node: Any) -> None:
        self.cluster, self.node = cluster, node

    async def info(self, section: str) -> Any:
        return await self.cluster.info(section, target_nodes=self.node)

    async def execute_command(self, *words: str) -> Any:
        return await self.cluster.execute_command(*words, target_nodes=self.node)

    async def config_get(self, name: str) -> Any:
        return await self.cluster.config_get(name, target_nodes=self.node)


async def check_cluster(cluster: Any, url: StoreURL, options: RedisOptions) -> list[str]:
    """`check_server` on every primary of a cluster: each node confirms the writes of the jobs
    it serves, so each must be able to wait as asked. Errors and warnings name the node."""
    warnings: list[tuple[Any, str]] = []
    for node in cluster.get_primaries():
        where = StoreURL.parse(f"redis://{node.name}")
        try:
            warnings += [
                (node, text) for text in await check_server(_Node(cluster, node), where, options)
            ]
        except ConfigError as exc:
            raise ConfigError(f"Redis Cluster {url}, primary {node.name}: {exc}") from None
    return [f"Redis Cluster {url}, primary {node.name}: {text}" for node, text in warnings]


async def _appendonly(client: Any) -> bool | None:
    try:
        reply: dict[str, str] = await client.config_get("appendonly")
    except rex.ResponseError:
        info: dict[str, Any] = await client.info("persistence")
        enabled = info.get("aof_enabled")
        return None if enabled is None else bool(int(enabled))
    value = reply.get("appendonly")
    return None if value is None else value == "yes"


def confirm_for(options: RedisOptions) -> Confirm | None:
    """The store's `Confirm`, or None without durability options."""
    return Confirm(options) if options.waits else None
