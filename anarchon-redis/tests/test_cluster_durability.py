"""Durability options on Redis Cluster (issue #24): ``wait_replicas`` / ``wait_timeout`` on a
``redis+cluster://`` store, against the module's cluster of 3 primaries + 3 replicas
(`test_topologies.cluster`).

Every write of the claim path is confirmed by ``WAIT`` on the node that took it: a claim on a
node whose replica is stopped (SIGSTOP) answers ``unknown`` within ``wait_timeout``, never
``won``, while a batch's jobs on the other nodes are confirmed by their own nodes' replicas and
answer ``won``; the resend with the same token (C2) answers ``won`` once the replica is back.
The conformance kit certifies the cluster store with waits on (`test_topologies`).
"""

from __future__ import annotations

import asyncio
import os
import signal
import time
from collections.abc import Iterator
from typing import Any

import pytest
import redis
from redis.cluster import RedisCluster

import anarchon
from anarchon import (
    ClaimRequest,
    ConfigError,
    LeaseStore,
    Outcome,
    Overlap,
    RunStatus,
    new_token,
)
from anarchon.backend import StoreUnavailable
from anarchon_redis import RedisStore

from .redis_servers import PrivateServer
from .redis_topologies import NODE_TIMEOUT_MS, LocalCluster, _spawn, start_cluster
from .test_topologies import cluster

STRATEGIES = ["lease", "stream-id", "script"]
WAIT = {"wait_replicas": 1, "wait_timeout": "1s"}
"""1 s: a healthy replica on a busy 2-core machine may take a few hundred ms to ack."""
WAIT_S = 1.0


def test_waits_are_accepted_on_a_cluster_except_with_idmp() -> None:
    for strategy in STRATEGIES:
        store = RedisStore.create("redis+cluster://127.0.0.1:7000", strategy=strategy, **WAIT)
        assert "WAIT 1, 1000 ms" in repr(store.link.confirm)
    with pytest.raises(ConfigError, match="strategy=idmp on Redis Cluster: idmp is not certified"):
        RedisStore.create("redis+cluster://127.0.0.1:7000", strategy="idmp", **WAIT)


def _jobs_by_node(local: LocalCluster, prefix: str) -> dict[int, list[str]]:
    """Job names grouped by the port of the primary serving them (at least 2 per primary)."""
    client = RedisCluster(host="127.0.0.1", port=local.primaries()[0])
    try:
        found: dict[int, list[str]] = {}
        for i in range(200):
            job = f"job{i}"
            port = int(client.get_node_from_key(f"{{{prefix}:{job}}}").port)
            found.setdefault(port, []).append(job)
        assert len(found) == 3 and all(len(jobs) >= 2 for jobs in found.values())
        return found
    finally:
        client.close()


def _replica_of(local: LocalCluster, primary: int) -> PrivateServer:
    """The replica (a server of `local`) of the primary on port `primary`."""
    client = redis.Redis(host="127.0.0.1", port=primary, decode_responses=True)
    try:
        info: Any = client.info("replication")
    finally:
        client.close()
    return local.server(int(info["slave0"]["port"]))


@pytest.fixture
def stopped() -> Iterator[list[PrivateServer]]:
    """Servers the test stops with SIGSTOP: continued afterwards whatever happens."""
    servers: list[PrivateServer] = []
    yield servers
    for server in servers:
        os.kill(server.process.pid, signal.SIGCONT)


def _request(job: str, slot: int, **fields: Any) -> ClaimRequest:
    fields.setdefault("instance", "cluster:1:aaaa")
    return ClaimRequest(
        job=job, slot=slot, max_late_ms=600_000, lease_ms=60_000, overlap=Overlap.ALLOW, **fields
    )


async def _open(strategy: str, prefix: str) -> Any:
    return await anarchon.connect(cluster().seed_url, strategy=strategy, prefix=prefix, **WAIT)


@pytest.mark.slow
@pytest.mark.parametrize("strategy", STRATEGIES)
async def test_a_claim_is_confirmed_by_its_own_node(
    strategy: str, stopped: list[PrivateServer]
) -> None:
    local = cluster()
    prefix = "w" + new_token()[:12]
    by_node = _jobs_by_node(local, prefix)
    paused_port, *others = sorted(by_node)
    first, second = by_node[paused_port][:2]
    elsewhere = [by_node[port][0] for port in others]
    store = await _open(strategy, prefix)
    other = await _open(strategy, prefix)
    try:
        now = await store.now_ms()
        slot = now - now % 1000
        # Healthy: every node's replica confirms; the batch spans all three primaries.
        warm = [_request(job, slot) for job in elsewhere]
        assert [c.outcome for c in await store.claim_many(warm)] == [Outcome.WON] * 2
        assert (await other.claim(_request("warmup", slot))).won
        replica = _replica_of(local, paused_port)
        os.kill(replica.process.pid, signal.SIGSTOP)
        stopped.append(replica)
        mine = _request(first, slot)
        started = time.monotonic()
        answer = await store.claim(mine)
        took = time.monotonic() - started
        assert answer.outcome is Outcome.UNKNOWN, answer
        assert answer.reason.startswith("unconfirmed: 0 of 1 replica(s)"), answer.reason
        assert took < WAIT_S + 2, f"unknown after {took:.1f} s"
        # Another instance does not win the slot the node holds for us.
        assert not (await other.claim(_request(first, slot, instance="cluster:2:bb"))).won
        # A batch over every node: the stopped replica's node answers unknown, the others won.
        batch = [_request(second, slot), *(_request(job, slot + 1000) for job in elsewhere)]
        outcomes = [c.outcome for c in await store.claim_many(batch)]
        assert outcomes == [Outcome.UNKNOWN, Outcome.WON, Outcome.WON], outcomes
        os.kill(replica.process.pid, signal.SIGCONT)
        stopped.remove(replica)
        again = await _resent(store, mine)
        assert again.outcome is Outcome.WON and again.token == mine.token
        resent = await store.claim_many([batch[0]])
        assert [c.outcome for c in resent] == [Outcome.WON]
    finally:
        await store.close()
        await other.close()


async def _resent(store: Any, request: ClaimRequest, seconds: float = 15) -> Any:
    """`request` sent again (same token, C2) until it is not `unknown` (the continued replica
    may take a moment to catch up and acknowledge)."""
    deadline = time.monotonic() + seconds
    while (answer := await store.claim(request)).outcome is Outcome.UNKNOWN:
        assert time.monotonic() < deadline, f"still unknown: {answer}"
    return answer


@pytest.mark.slow
async def test_lease_calls_are_confirmed_by_their_node(stopped: list[PrivateServer]) -> None:
    """Renew and finish on the job's node raise `StoreUnavailable` while its replica is stopped
    (finish resent afterwards is recognised and confirmed, C2); `check` of the caller's own run
    answers ``unknown``, not the ``won`` a plain read would give."""
    local = cluster()
    prefix = "w" + new_token()[:12]
    by_node = _jobs_by_node(local, prefix)
    port = sorted(by_node)[1]
    job = by_node[port][0]
    store = await _open("lease", prefix)
    try:
        assert isinstance(store, LeaseStore)
        now = await store.now_ms()
        slot = now - now % 1000
        mine = _request(job, slot)
        assert (await store.claim(mine)).won
        replica = _replica_of(local, port)
        os.kill(replica.process.pid, signal.SIGSTOP)
        stopped.append(replica)
        checked = await store.check(mine)
        assert checked.outcome is Outcome.UNKNOWN, checked
        with pytest.raises(StoreUnavailable, match="renew not confirmed"):
            await store.renew(job, slot, mine.token, 60_000)
        with pytest.raises(StoreUnavailable, match="finish not confirmed"):
            await store.finish(job, slot, mine.token, RunStatus.SUCCEEDED)
        os.kill(replica.process.pid, signal.SIGCONT)
        stopped.remove(replica)
        deadline = time.monotonic() + 15
        while True:
            try:
                assert await store.finish(job, slot, mine.token, RunStatus.SUCCEEDED)
                break
            except StoreUnavailable:
                assert time.monotonic() < deadline
        assert (await store.check(mine)).outcome is Outcome.DONE
    finally:
        await store.close()


async def test_wait_aof_is_checked_on_every_primary() -> None:
    """At open each primary must have WAITAOF (Redis 7.2+): the error names the node."""
    local = cluster()
    info: Any = redis.Redis(host="127.0.0.1", port=local.primaries()[0]).info("server")
    if not str(info["redis_version"]).startswith(("6.", "7.0", "7.1")):
        pytest.skip(f"this cluster's Redis {info['redis_version']} has WAITAOF")
    with pytest.raises(ConfigError, match=r"Redis Cluster .*, primary 127\.0\.0\.1:\d+: .*WAITAOF"):
        await anarchon.connect(local.seed_url, wait_aof=True)


@pytest.mark.slow
async def test_a_primary_restarted_before_its_failover_takes_its_replica_back() -> None:
    """What ``WAIT`` cannot prevent (docs/durability.md, Redis Cluster): a primary killed and
    started again *before* the cluster fails it over still owns its slots (no election ran, its
    config epoch is still the newest), comes back as their primary with the data of the
    ``dump.rdb`` in its folder (here saved before the claim; in the failover harness, the RDB its
    last full sync as a replica left), and its replica, which had acknowledged the claim,
    resynchronises from it and drops the claim: another instance then wins the run. The chaos
    harness used to restart a killed primary this early now and then (its check for the
    promotion read two snapshots, and passed when the first still listed the killed node
    healthy and the second already flagged it); it now waits until every node sees the replica
    promoted."""
    local = start_cluster()
    prefix = "r" + new_token()[:12]
    job = "restarted"
    store = await anarchon.connect(local.seed_url, prefix=prefix, **WAIT)
    other = await anarchon.connect(local.seed_url, prefix=prefix, **WAIT)
    try:
        client = RedisCluster(host="127.0.0.1", port=local.primaries()[0])
        try:
            port = int(client.get_node_from_key(f"{{{prefix}:{job}}}").port)
        finally:
            client.close()
        primary = redis.Redis(host="127.0.0.1", port=port, decode_responses=True)
        epochs = _epochs(port)
        _save(primary)  # an older state in the node's folder
        primary.close()
        replica = _replica_of(local, port)
        now = await store.now_ms()
        slot = now - now % 1000
        assert (await store.claim(_request(job, slot))).won  # confirmed: the replica has it
        server = local.server(port)
        server.process.kill()
        server.process.wait()
        again = _spawn(
            server.binary,
            port,
            server.directory,
            *("--cluster-enabled", "yes", "--cluster-config-file", "nodes.conf"),
            *("--cluster-node-timeout", str(NODE_TIMEOUT_MS)),
        )
        server.process = again.process
        deadline = time.monotonic() + 60
        while not _replicates(replica.port, port):
            assert time.monotonic() < deadline, "the replica did not resync from the restarted node"
            await asyncio.sleep(0.1)
        assert _epochs(port) == epochs  # no failover: the restarted node kept its slots
        while True:  # its connection to the killed node is gone: resent until answered
            try:
                second = await _resent(other, _request(job, slot, instance="cluster:2:bb"))
                break
            except StoreUnavailable:
                assert time.monotonic() < deadline
                await asyncio.sleep(0.1)
        assert second.won, second  # the confirmed claim is gone: a second winner
    finally:
        await store.close()
        await other.close()
        local.stop()


def _save(node: redis.Redis) -> None:
    """SAVE on `node`, once the background save a replica's full sync started (if any) ended:
    until then Redis refuses a SAVE ("Background save already in progress")."""
    deadline = time.monotonic() + 30
    while True:
        try:
            assert node.execute_command("SAVE")
            return
        except redis.ResponseError as error:
            if "in progress" not in str(error) or time.monotonic() > deadline:
                raise
        time.sleep(0.1)


def _epochs(port: int) -> dict[str, str]:
    """Each node's config epoch as the node on `port` sees it."""
    client = redis.Redis(host="127.0.0.1", port=port, decode_responses=True)
    try:
        nodes: Any = client.execute_command("CLUSTER NODES")
    finally:
        client.close()
    return {node["node_id"]: node["epoch"] for node in nodes.values()}


def _replicates(replica: int, primary: int) -> bool:
    """The node on `replica` replicates the node on `primary` as it runs now: linked to it and
    on its replication id (a restarted node has a new one, so an old link does not count)."""
    infos: list[Any] = []
    for port in (replica, primary):
        client = redis.Redis(host="127.0.0.1", port=port, socket_timeout=2)
        try:
            infos.append(client.info("replication"))
        except (redis.RedisError, OSError):
            return False
        finally:
            client.close()
    theirs, ours = infos
    return bool(
        theirs.get("role") == "slave"
        and int(theirs.get("master_port", 0)) == primary
        and theirs.get("master_link_status") == "up"
        and ours.get("role") == "master"
        and theirs.get("master_replid") == ours.get("master_replid")
    )
