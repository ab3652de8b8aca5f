"""Redis Cluster (``redis+cluster://``) and Sentinel (``redis+sentinel://``): the URL forms, the
conformance kit on each topology, and a primary killed under a claimed run.

The topologies are the module's own (`redis_topologies`): a cluster of 3 primaries + 3 replicas
and a primary + replica + 3 sentinels, started once on first use and stopped at exit. CI
certifies ``strategy=lease`` on the cluster, with and without ``wait_replicas=1`` (without the
kit's two longest checks, the stateful model and C1 across OS processes) and kills a primary on each topology;
``ANARCHON_TEST_ALL_TOPOLOGIES=1`` (``nox -s redis_topologies``) runs every check and certifies
``lease`` and ``script`` through Sentinel and ``script`` and ``stream-id`` on the cluster too
(each also with ``wait_replicas=1``).
"""

from __future__ import annotations

import asyncio
import os
import time
from typing import Any, ClassVar

import pytest
import redis.asyncio as aioredis
from redis.asyncio.cluster import RedisCluster

import anarchon
from anarchon import ClaimRequest, ConfigError, Outcome, Overlap, StoreUnavailable, new_token
from anarchon_conformance import ConformanceSuite
from anarchon_redis import RedisStore, testing

from .redis_topologies import LocalCluster, LocalSentinel, start_cluster, start_sentinel
from .test_conformance import RedisHarness

ALL = os.environ.get("ANARCHON_TEST_ALL_TOPOLOGIES") == "1"

_topologies: dict[str, LocalCluster | LocalSentinel] = {}


def cluster() -> LocalCluster:
    """The process's cluster, started on first use (about 3 s)."""
    if "cluster" not in _topologies:
        _topologies["cluster"] = start_cluster()
    found = _topologies["cluster"]
    assert isinstance(found, LocalCluster)
    return found


def sentinel() -> LocalSentinel:
    """The process's Sentinel setup, started on first use (about 4 s)."""
    if "sentinel" not in _topologies:
        _topologies["sentinel"] = start_sentinel()
    found = _topologies["sentinel"]
    assert isinstance(found, LocalSentinel)
    return found


def raw_client(kind: str) -> aioredis.Redis:
    """A plain redis-py client on the topology (the backdoors' oracle)."""
    if kind == "cluster":
        port = cluster().primaries()[0]
        client = RedisCluster(host="127.0.0.1", port=port, decode_responses=True)
        return client  # type: ignore[return-value]  # the backdoors use the shared commands
    port = sentinel().primary_port()
    return aioredis.Redis(host="127.0.0.1", port=port or 0, decode_responses=True)


# --- URL forms (no server reached) ---------------------------------------------------------


@pytest.mark.parametrize(
    ("url", "words"),
    [
        ("redis+cluster://127.0.0.1:7000/3", "only database 0"),
        ("redis+sentinel://127.0.0.1:26379", "names no service"),
        ("redis+sentinel://127.0.0.1:26379/svc/x", "names no service"),
        ("redis+sentinel://127.0.0.1:26379/svc?tls_ca_file=/etc/hostname", "TLS"),
        ("redis://127.0.0.1:6379/0?sentinel_password=x", "only to redis\\+sentinel"),
        ("redis+cluster://127.0.0.1:7000?sentinel_password=x", "only to redis\\+sentinel"),
        ("redis+sentinel://127.0.0.1/svc?sentinel_username=u", "needs sentinel_password"),
    ],
)
def test_topology_urls_refused_say_why(url: str, words: str) -> None:
    with pytest.raises(ConfigError, match=words):
        RedisStore.create(url)


def test_topology_urls_accepted() -> None:
    store = RedisStore.create("redis+sentinel://:pw@127.0.0.1:26380/mymaster/2?sentinel_password=s")
    assert store.link.topology.kind == "sentinel"
    assert store.link.topology.service == "mymaster"
    assert store.link.topology.db == 2
    assert store.link.topology.nodes == (("127.0.0.1", 26380),)
    assert "s" not in str(store.url).split("?")[1].replace("sentinel_password=***", "")
    store = RedisStore.create("rediss+cluster://127.0.0.1:7000", strategy="script")
    assert (store.link.topology.kind, store.link.topology.tls) == ("cluster", True)


# --- the conformance kit -------------------------------------------------------------------


class TopologyHarness(RedisHarness):
    """One strategy on the module's cluster or Sentinel setup. The proxy checks do not apply:
    a cluster client follows the nodes' own addresses, a Sentinel client the primary's."""

    topology: ClassVar[str] = "cluster"

    async def setup(self) -> None:
        if (self.strategy != "lease" or self.topology != "cluster") and not ALL:
            pytest.skip("certified on this topology by nox -s redis_topologies (CI: cluster lease)")
        local = cluster() if self.topology == "cluster" else sentinel()
        self.base = local.seed_url
        self.raw = raw_client(self.topology)
        self.used = {f"anarchon-test-{self.run_id}"}

    @property
    def name(self) -> str:  # type: ignore[override]
        return f"redis-{self.topology}-{self.strategy}"

    def url(self, address: tuple[str, int] | None = None) -> str:
        options = "&".join(
            f"{k}={v}" for k, v in {"strategy": self.strategy, **self.options}.items()
        )
        return f"{self.base}?{options}"

    def address(self) -> tuple[str, int] | None:
        return None

    async def server_version(self) -> str:
        info: Any = await self.raw.info("server")
        if isinstance(info, dict) and "redis_version" not in info:  # a cluster: node -> info
            info = next(iter(info.values()))
        return f"Redis {info['redis_version']} ({self.topology})"


class ClusterLease(TopologyHarness):
    strategy = "lease"


class ClusterScript(TopologyHarness):
    strategy = "script"


class ClusterStreamId(TopologyHarness):
    strategy = "stream-id"
    claims_in_slot_order = True


class ClusterLeaseWait(ClusterLease):
    """The cluster with durability options: every claim and lease call confirmed by ``WAIT``
    on the node that took it (`anarchon_redis._durability`)."""

    options: ClassVar[dict[str, Any]] = {"wait_replicas": 1, "wait_timeout": "1s"}

    @property
    def name(self) -> str:  # type: ignore[override]
        return "redis-cluster-lease-wait_replicas"


class ClusterScriptWait(ClusterLeaseWait):
    strategy = "script"

    @property
    def name(self) -> str:  # type: ignore[override]
        return "redis-cluster-script-wait_replicas"


class ClusterStreamIdWait(ClusterLeaseWait):
    strategy = "stream-id"
    claims_in_slot_order = True

    @property
    def name(self) -> str:  # type: ignore[override]
        return "redis-cluster-stream-id-wait_replicas"


class SentinelLease(TopologyHarness):
    topology = "sentinel"
    strategy = "lease"


class SentinelScript(TopologyHarness):
    topology = "sentinel"
    strategy = "script"


class TestClusterLeaseConformance(ConformanceSuite):
    harness_class = ClusterLease
    if not ALL:  # the two longest checks (about 2 minutes on a busy machine): nox only
        test_MODEL_agrees_with_the_memory_reference = None
        test_C1_single_winner_processes = None


class TestClusterLeaseWaitConformance(ConformanceSuite):
    harness_class = ClusterLeaseWait
    if not ALL:
        test_MODEL_agrees_with_the_memory_reference = None
        test_C1_single_winner_processes = None


if ALL:  # nox -s redis_topologies; CI certifies lease on the cluster only (with and without waits)

    class TestClusterScriptWaitConformance(ConformanceSuite):
        harness_class = ClusterScriptWait

    class TestClusterStreamIdWaitConformance(ConformanceSuite):
        harness_class = ClusterStreamIdWait

    class TestClusterScriptConformance(ConformanceSuite):
        harness_class = ClusterScript

    class TestClusterStreamIdConformance(ConformanceSuite):
        harness_class = ClusterStreamId

    class TestSentinelLeaseConformance(ConformanceSuite):
        harness_class = SentinelLease

    class TestSentinelScriptConformance(ConformanceSuite):
        harness_class = SentinelScript


# --- a batch over every node ----------------------------------------------------------------


async def test_cluster_claim_many_spans_every_node() -> None:
    """`claim_many` of jobs whose slots live on all three primaries: each answered as a single
    claim would be (won, then the same tokens won again, other tokens running)."""
    local = cluster()
    prefix = "b" + new_token()[:12]
    store = await anarchon.connect(local.seed_url, prefix=prefix)
    raw = raw_client("cluster")
    await raw.initialize()  # type: ignore[attr-defined]
    try:
        now = await store.now_ms()
        slot = now - now % 1000
        jobs = [f"job{i}" for i in range(60)]
        nodes = {raw.get_node_from_key(f"{{{prefix}:{job}}}").name for job in jobs}  # type: ignore[attr-defined]
        assert len(nodes) == 3
        first = [request(job, slot) for job in jobs]
        assert [c.outcome for c in await store.claim_many(first)] == [Outcome.WON] * len(jobs)  # type: ignore[attr-defined]
        again = await store.claim_many(first)  # type: ignore[attr-defined]
        assert [c.outcome for c in again] == [Outcome.WON] * len(jobs)
        other = await store.claim_many([request(job, slot) for job in jobs])  # type: ignore[attr-defined]
        assert [c.outcome for c in other] == [Outcome.RUNNING] * len(jobs)
        for job in jobs[:5]:
            run = await testing.raw_run(raw, prefix, job, slot)
            assert run is not None and run.token == first[jobs.index(job)].token
    finally:
        await store.close()
        await testing.delete_prefix(raw, prefix)
        await raw.aclose()


def request(job: str, slot: int, token: str | None = None) -> ClaimRequest:
    return ClaimRequest(
        job=job,
        slot=slot,
        token=token or new_token(),
        instance="topology:1:test",
        overlap=Overlap.ALLOW,
        lease_ms=60_000,
        max_late_ms=120_000,
    )


# --- a primary killed under a claimed run ----------------------------------------------------


async def _claim_until_answered(
    store: Any, claim: ClaimRequest, seconds: float
) -> tuple[Any, float, int]:
    """Resend `claim` (same token, C2) until the store answers; the answer, the seconds it took
    and how many tries failed with `StoreUnavailable`."""
    started, failures = time.monotonic(), 0
    while True:
        try:
            return await store.claim(claim), time.monotonic() - started, failures
        except StoreUnavailable:
            failures += 1
            if time.monotonic() - started > seconds:
                raise
            await asyncio.sleep(0.05)


@pytest.mark.slow
@pytest.mark.parametrize("kind", ["cluster", "sentinel"])
async def test_primary_killed_after_a_replicated_claim(kind: str) -> None:
    """A run won on the primary and replicated (WAIT 1 from the oracle) stays the winner's
    after the primary dies and its replica is promoted: another instance's claim fails
    (`StoreUnavailable`) until the failover, then answers `running`, never `won`; the winner's
    resend (same token) answers `won` again (C2). Time to recover is reported."""
    local = cluster() if kind == "cluster" else sentinel()
    prefix = "f" + new_token()[:12]
    job = "failover"
    winner = await anarchon.connect(local.seed_url, prefix=prefix)
    other = await anarchon.connect(local.seed_url, prefix=prefix)
    try:
        now = await winner.now_ms()
        slot = now - now % 1000
        mine = request(job, slot)
        assert (await winner.claim(mine)).outcome is Outcome.WON
        if isinstance(local, LocalCluster):
            raw = raw_client("cluster")
            await raw.initialize()  # type: ignore[attr-defined]
            node = raw.get_node_from_key(f"{{{prefix}:{job}}}")  # type: ignore[attr-defined]
            await raw.execute_command("WAIT", 1, 5000, target_nodes=node)  # type: ignore[call-arg]
            await raw.aclose()
            victim = local.server(int(node.port))
        else:
            port = local.primary_port()
            assert port is not None
            raw = aioredis.Redis(host="127.0.0.1", port=port)
            assert await raw.execute_command("WAIT", 1, 5000) == 1
            await raw.aclose()
            victim = local.server(port)
        victim.process.kill()
        victim.process.wait()
        answer, took, failures = await _claim_until_answered(other, request(job, slot), 60)
        assert answer.outcome is Outcome.RUNNING, answer
        assert answer.token == mine.token
        again, _, _ = await _claim_until_answered(winner, mine, 30)
        assert again.outcome is Outcome.WON
        print(f"{kind}: answered {took:.2f} s after the kill, {failures} tries unavailable")
    finally:
        await winner.close()
        await other.close()
        _topologies.pop(kind, None)  # one primary down: the next test gets a fresh topology
        local.stop()
