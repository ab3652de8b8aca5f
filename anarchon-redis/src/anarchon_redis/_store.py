"""The store classes: `RedisStore` and one subclass per strategy, which `anarchon.connect` picks
with `RedisStore.from_url`. A store holds the connection's life (open, close, the server's
clock) and hands claims, batches and history to its `Strategy` (``_strategies/``). The lease
strategy's store is a `LeaseStore` (`RedisLeaseStore`), so the runtime heartbeats its runs; the
no-lease stores are not. Keys of one job share the hash tag ``{prefix:job}``.

Every store lists its jobs (`anarchon.abc.SupportsJobList`, with SCAN: see `_keyspace` for why)
and opens read-only (`anarchon.abc.SupportsReadOnly`, R1): connect and check the prefix holds
the strategy's keys, with reads only (no script or function loaded, no key written); history,
the clock and the job list are plain reads, so a user allowed only ``@read`` commands can run
``anarchon history`` and ``status``. A store opened so refuses claims and lease calls.

The lease and script stores also pause jobs and trigger runs (`anarchon.abc.SupportsPause`,
`SupportsTrigger`; `_control`): their claim scripts read the job's pause in the same call.
stream-id and idmp claim with a bare ``XADD`` and offer neither. Every store keeps the fleet's
member list (`anarchon.abc.SupportsMembership`, M1; `_members`)."""

from __future__ import annotations

from collections.abc import Awaitable, Sequence
from typing import TYPE_CHECKING, ClassVar, TypeVar

import attrs

from anarchon.backend import (
    Capabilities,
    Claim,
    ClaimRequest,
    ClaimStore,
    ConfigError,
    LeaseStore,
    RunRecord,
    RunStatus,
    StoreOptions,
    StoreUnavailable,
    StoreURL,
    structure_options,
)

from ._connection import Link
from ._control import Control
from ._keys import JobKeys
from ._members import Membership
from ._options import RedisOptions
from ._strategies import (
    IdmpStrategy,
    LeaseStrategy,
    ScriptStrategy,
    Strategy,
    StreamIdStrategy,
    strategy_for,
)
from ._topology import Topology

if TYPE_CHECKING:
    import redis.asyncio as aioredis
    from typing_extensions import Self

__all__ = ["IdmpStore", "RedisLeaseStore", "RedisStore", "ScriptStore", "StreamIdStore"]

T = TypeVar("T")


class RedisStore(ClaimStore, Membership):
    """A Redis claim store. Build it with `anarchon.connect`, `RedisStore.create` or
    `RedisStore.from_url`, which give the class of ``options.strategy``. Every strategy keeps
    the fleet's member list (M1, `Membership`)."""

    Options: ClassVar[type[StoreOptions]] = RedisOptions
    strategy_name: ClassVar[str] = ""
    """The ``strategy=`` this class serves."""

    def __init__(self, url: StoreURL, options: StoreOptions) -> None:
        if not isinstance(options, RedisOptions):
            raise TypeError(f"RedisStore needs RedisOptions, got {type(options).__name__}")
        if options.strategy != self.strategy_name:
            raise ConfigError(
                f"{type(self).__name__} is strategy={self.strategy_name or '?'}, the options say "
                f"strategy={options.strategy}; build stores with anarchon.connect, "
                "RedisStore.create or RedisStore.from_url"
            )
        topology = Topology.of(url)  # a ConfigError for a URL of no topology we know
        if not topology.tls and options.tls_given:
            raise ConfigError(
                f"Redis URL {url}: the TLS options ({', '.join(options.tls_given)}) need a TLS "
                "connection: use rediss://host:port/db (the server's TLS port), or "
                "rediss+cluster:// (TLS is not offered with redis+sentinel://)"
            )
        if topology.kind != "sentinel" and (
            options.sentinel_password is not None or options.sentinel_username is not None
        ):
            raise ConfigError(
                f"Redis URL {url}: sentinel_username and sentinel_password apply only to "
                "redis+sentinel:// URLs: remove them"
            )
        if topology.kind == "cluster" and options.waits and options.strategy == "idmp":
            raise ConfigError(
                f"Redis URL {url}: wait_replicas and wait_aof are not offered with strategy=idmp "
                "on Redis Cluster: idmp is not certified on a cluster (it needs Redis 8.6, and "
                "its per-job stream settings are written outside the claim), so nothing says "
                "its confirmed claims hold there. Use strategy=lease, script or stream-id, or "
                "a primary with replicas (redis:// or redis+sentinel://)"
            )
        self.url = url
        self.options: RedisOptions = options
        self.link = Link(url, options, repr(self))
        """The connection, handed to the strategy with each call."""
        self.strategy: Strategy = strategy_for(options)

    @classmethod
    def from_url(cls, url: StoreURL, options: StoreOptions) -> Self:
        """The store of ``options.strategy`` (`anarchon.connect` calls this)."""
        if not isinstance(options, RedisOptions):
            raise TypeError(f"RedisStore needs RedisOptions, got {type(options).__name__}")
        chosen = STORES[options.strategy]
        if not issubclass(chosen, cls):
            raise ConfigError(
                f"{cls.__name__} cannot be strategy={options.strategy}: that is {chosen.__name__}"
            )
        return chosen(url, options)

    @classmethod
    def create(cls, url: str, **options: object) -> RedisStore:
        """Build a store directly (tests, examples); open it with ``await store.open()``."""
        parsed = StoreURL.parse(url)
        opts = structure_options(RedisOptions, {**parsed.options(), **options}, where="redis://")
        return RedisStore.from_url(parsed, opts)

    def __repr__(self) -> str:
        return (
            f"{type(self).__name__}({str(self.url)!r}, strategy={self.strategy_name!r}, "
            f"prefix={self.options.prefix!r})"
        )

    @property
    def client(self) -> aioredis.Redis:
        """The redis-py client while the store is open."""
        return self.link.client

    def keys(self, job: str) -> JobKeys:
        return self.strategy.keys(job)

    @property
    def capabilities(self) -> Capabilities:
        return attrs.evolve(self.strategy.capabilities, membership=True)

    async def open(self) -> None:
        await self.link.open(self.strategy.setup)

    async def open_read_only(self) -> None:
        """`anarchon.abc.SupportsReadOnly` (R1): connect and check, with SCAN, that the prefix
        holds keys of this strategy (`StoreNotSetUp` naming the database and prefix if not);
        nothing is loaded or written."""
        await self.link.open(self.strategy.check_set_up, read_only=True)

    def _refused(self) -> RuntimeError:
        return RuntimeError(
            f"{self!r} was opened read-only (open_read_only, connect(..., read_only=True)), "
            "which makes no claims: open it with await store.open() or anarchon.connect(url)"
        )

    async def close(self) -> None:
        await self.link.close()

    async def now_ms(self) -> int:
        return await self.link.now_ms()

    @property
    def notices(self) -> tuple[str, ...]:
        """What the store noticed about its server that a health check should show: a restart
        (its run id changed; `anarchon_redis._server`) and claims that replicas did not
        confirm (durability options)."""
        found: list[str] = []
        watch, confirm = self.link.watch, self.link.confirm
        if watch.notice is not None:
            found.append(f"{watch.notice} ({watch.restarts} restart(s) seen since open)")
        if confirm is not None and confirm.unconfirmed:
            found.append(
                f"{confirm.unconfirmed} write(s) not confirmed by replicas since open ({confirm!r})"
            )
        return tuple(found)

    async def _watched(self, call: Awaitable[T]) -> T:
        """`call` between looks at the server's run id when due (`restart_check_ms`); a failure
        and a new connection make it due."""
        await self.link.watch_server()
        try:
            result = await call
        except StoreUnavailable:
            self.link.watch.failed()
            raise
        # The call may have reconnected (redis-py does so silently on a dead connection): say
        # at once if that was to a restarted server.
        await self.link.watch_server()
        return result

    async def claim(self, request: ClaimRequest) -> Claim:
        if self.link.read_only:
            raise self._refused()
        return await self._watched(self.strategy.claim(self.link, request))

    async def claim_many(self, requests: Sequence[ClaimRequest]) -> list[Claim]:
        """`anarchon.abc.SupportsClaimMany`: the strategy's batch, each job answered as its
        single claim would be."""
        if self.link.read_only:
            raise self._refused()
        return await self._watched(self.strategy.claim_many(self.link, requests))

    async def history(self, job: str, limit: int = 100) -> list[RunRecord]:
        return await self.strategy.history(self.link, job, limit)

    async def jobs(self) -> list[str]:
        """`anarchon.abc.SupportsJobList`: the jobs of this prefix with a remembered run (lease:
        or a floor), sorted; read with SCAN, writing nothing (see `_keyspace`)."""
        return await self.strategy.jobs(self.link)


class RedisLeaseStore(RedisStore, LeaseStore, Control):
    """``strategy=lease``: a `LeaseStore`; renew, finish, release and check go to its
    `LeaseStrategy`, and so does retry (L12). Pause and trigger (P1, X1) are `Control`'s."""

    strategy_name = "lease"
    strategy: LeaseStrategy

    async def renew(self, job: str, slot: int, token: str, lease_ms: int) -> bool:
        if self.link.read_only:
            raise self._refused()
        return await self._watched(self.strategy.renew(self.link, job, slot, token, lease_ms))

    async def finish(
        self, job: str, slot: int, token: str, status: RunStatus, error: str | None = None
    ) -> bool:
        if self.link.read_only:
            raise self._refused()
        return await self._watched(self.strategy.finish(self.link, job, slot, token, status, error))

    async def release(self, job: str, slot: int, token: str) -> bool:
        if self.link.read_only:
            raise self._refused()
        return await self._watched(self.strategy.release(self.link, job, slot, token))

    async def retry(self, job: str, slot: int, token: str, error: str, delay_ms: int) -> bool:
        """`SupportsRetry` (L12): log the failed try and hold the run for `delay_ms`."""
        if self.link.read_only:
            raise self._refused()
        return await self.strategy.retry(self.link, job, slot, token, error, delay_ms)

    async def check(self, request: ClaimRequest) -> Claim:
        if self.link.read_only:
            raise self._refused()
        return await self._watched(self.strategy.check(self.link, request))


class StreamIdStore(RedisStore):
    """``strategy=stream-id`` (`StreamIdStrategy`): no leases."""

    strategy_name = "stream-id"
    strategy: StreamIdStrategy


class IdmpStore(RedisStore):
    """``strategy=idmp`` (`IdmpStrategy`, Redis 8.6+): no leases; sets each job's stream up
    when a scheduler starts (`anarchon.abc.SupportsJobSetup`)."""

    strategy_name = "idmp"
    strategy: IdmpStrategy

    async def setup_jobs(self, jobs: Sequence[str]) -> None:
        if self.link.read_only:
            raise self._refused()
        await self.strategy.setup_jobs(self.link, jobs)


class ScriptStore(RedisStore, Control):
    """``strategy=script`` (`ScriptStrategy`): no leases; pause and trigger (P1, X1) are
    `Control`'s."""

    strategy_name = "script"
    strategy: ScriptStrategy


STORES: dict[str, type[RedisStore]] = {
    cls.strategy_name: cls for cls in (RedisLeaseStore, StreamIdStore, IdmpStore, ScriptStore)
}
"""``strategy=`` value -> the store class that serves it."""
