"""`RedisStore`: the class `anarchon.connect("redis://...")` builds. It returns the store of the
chosen strategy: `RedisLeaseStore` (a `LeaseStore`) for ``strategy=lease``, and the no-lease
`StreamIdStore`, `IdmpStore` or `ScriptStore` otherwise (not `LeaseStore`s, so the runtime does
not heartbeat their runs)."""

from __future__ import annotations

from collections.abc import Callable, Iterator, Sequence
from typing import TYPE_CHECKING, Any, ClassVar, NoReturn, TypeVar
from urllib.parse import unquote

import redis.asyncio as aioredis
import redis.exceptions as rex

from anarchon import (
    AnarchonError,
    ClaimRequest,
    ClaimStore,
    ConfigError,
    StoreCorrupt,
    StoreOptions,
    StoreURL,
)

from . import _wire as wire
from ._client import Script, guarded, make_client, ping, reraising, server_now_ms, translated
from ._keys import JobKeys
from ._options import RedisOptions
from ._wire import bulk, invoke

if TYPE_CHECKING:
    from typing_extensions import Self

__all__ = ["BATCH", "RedisStore"]

T = TypeVar("T")

SCHEMES = ("redis", "rediss")
KEY_CACHE = 100_000
BATCH = 500
"""Jobs per claim script call in `claim_many`. Redis serves nothing else while a script runs:
500 won lease claims take about 5 ms of server time on the development machine."""


def _strategy_class(strategy: str) -> type[RedisStore]:
    from ._idmp import IdmpStore
    from ._lease import RedisLeaseStore
    from ._script import ScriptStore
    from ._stream_id import StreamIdStore

    classes: dict[str, type[RedisStore]] = {
        "lease": RedisLeaseStore,
        "stream-id": StreamIdStore,
        "idmp": IdmpStore,
        "script": ScriptStore,
    }
    return classes[strategy]


class RedisStore(ClaimStore):
    """A Redis claim store; ``RedisStore(url, options)`` returns the class of
    ``options.strategy``. Keys of one job share the hash tag ``{prefix:job}``."""

    Options: ClassVar[type[StoreOptions]] = RedisOptions
    strategy: ClassVar[str] = ""

    def __new__(cls, url: StoreURL, options: StoreOptions) -> Self:
        if cls is RedisStore:
            if not isinstance(options, RedisOptions):
                raise TypeError(f"RedisStore needs RedisOptions, got {type(options).__name__}")
            chosen: Any = _strategy_class(options.strategy)
            return super().__new__(chosen)  # type: ignore[no-any-return]
        return super().__new__(cls)

    def __init__(self, url: StoreURL, options: StoreOptions) -> None:
        if not isinstance(options, RedisOptions):
            raise TypeError(f"RedisStore needs RedisOptions, got {type(options).__name__}")
        if url.scheme not in SCHEMES:
            raise ConfigError(f"Redis URL {url} must start with redis:// or rediss:// (TLS)")
        if options.strategy != self.strategy:
            raise ConfigError(
                f"{type(self).__name__} is strategy={self.strategy}, the options say "
                f"strategy={options.strategy}; build stores with anarchon.connect or RedisStore"
            )
        if url.scheme != "rediss" and options.tls_given:
            raise ConfigError(
                f"Redis URL {url}: the TLS options ({', '.join(options.tls_given)}) need a TLS "
                "connection: use rediss://host:port/db (the server's TLS port)"
            )
        if url.path and not url.path.isdigit():
            raise ConfigError(
                f"Redis URL {url}: the path must be a database number such as /0, got {url.path!r}"
            )
        self.url = url
        self.options: RedisOptions = options
        self._client: aioredis.Redis | None = None
        self._packed_keys: dict[str, str] = {}
        self._functions = False
        """The claim script is called as a Redis function (`Script.load_function`)."""

    @classmethod
    def create(cls, url: str, **options: object) -> RedisStore:
        """Build a store directly (tests, examples); open it with ``await store.open()``."""
        from anarchon._options import structure_options

        parsed = StoreURL.parse(url)
        opts = structure_options(RedisOptions, {**parsed.options(), **options}, where="redis://")
        factory: Any = RedisStore
        store: RedisStore = factory(parsed, opts)
        return store

    def __repr__(self) -> str:
        return (
            f"{type(self).__name__}({str(self.url)!r}, strategy={self.strategy!r}, "
            f"prefix={self.options.prefix!r})"
        )

    @property
    def client(self) -> aioredis.Redis:
        if self._client is None:
            raise RuntimeError(f"{self!r} is not open: await store.open() (or anarchon.connect)")
        return self._client

    def keys(self, job: str) -> JobKeys:
        return JobKeys(self.options.prefix, job)

    keys_per_job: ClassVar[int] = 1
    """How many keys of each job the strategy's claim script takes (`_script_keys`)."""

    def _script_keys(self, keys: JobKeys) -> list[str]:
        """The keys of one job that this strategy's claim script takes, in its order."""
        return [keys.claims]

    def _wire_keys(self, job: str) -> str:
        """`_script_keys` of `job` packed for the wire (`_wire`). Cached: the same jobs claim
        slot after slot; the cache is emptied if it ever holds `KEY_CACHE` jobs."""
        packed = self._packed_keys.get(job)
        if packed is None:
            if len(self._packed_keys) >= KEY_CACHE:
                self._packed_keys.clear()
            packed = "".join([bulk(key) for key in self._script_keys(self.keys(job))])
            self._packed_keys[job] = packed
        return packed

    def _ask(self, request: ClaimRequest) -> str:
        """`request` as the claim script takes it (see the script's header)."""
        raise NotImplementedError

    def _call(self, script: Script, option: str, requests: Sequence[ClaimRequest]) -> bytes:
        """One call (FCALL where the store uses functions, else EVALSHA) of the claim `script`
        for `requests`, packed; `option` is its packed ``claim <number>`` (``batch.lua``)."""
        keys = "".join([self._wire_keys(r.job) for r in requests])
        asks = "".join([bulk(self._ask(r)) for r in requests])
        count = len(requests)
        return invoke(self._head(script), self.keys_per_job * count, keys, 1 + count, option + asks)

    def _call_one(self, script: Script, option: str, request: ClaimRequest) -> bytes:
        """`_call` for one request, without the joins over requests (the single claim's path)."""
        keys = self._wire_keys(request.job)
        ask = option + bulk(self._ask(request))
        return invoke(self._head(script), self.keys_per_job, keys, 2, ask)

    def _head(self, script: Script) -> str:
        """The packed first words of a call of `script`: FCALL where the store uses functions."""
        return script.fcall_head if self._functions and script.function else script.eval_head

    async def _refuse(self, job: str, exc: Exception) -> NoReturn:
        """Raise `exc` as anarchon's error for a claim of `job` (a WRONGTYPE names the key)."""
        keys = self.keys(job)
        await guarded(self.client, self.url, keys, self._script_keys(keys), reraising(exc))
        raise exc  # guarded raised already; this line tells the type checker

    async def _decided_one(
        self,
        script: Script,
        option: str,
        request: ClaimRequest,
        decide: Callable[[ClaimRequest, str], T],
    ) -> T:
        """`_decided` for one request, with less around it: the single claim is the hot path."""
        packed = self._call_one(script, option, request)
        try:
            try:
                answer = await wire.call(self.client.connection_pool, packed)
            except rex.ResponseError as exc:
                if not script.missing(exc):  # a restart or a flush forgot it: load, send again
                    raise
                await script.load(self.client, self._functions)
                answer = await wire.call(self.client.connection_pool, packed)
        except (rex.RedisError, OSError, UnicodeDecodeError) as exc:
            await self._refuse(request.job, exc)
        if not isinstance(answer, str):
            await self._refuse(request.job, self._odd(answer, 1))
        if answer.startswith("error "):
            await self._refuse(request.job, rex.ResponseError(unquote(answer[6:])))
        try:
            return decide(request, answer)
        except StoreCorrupt as exc:
            await self._refuse(request.job, exc)

    def _odd(self, reply: object, jobs: int) -> StoreCorrupt:
        return StoreCorrupt(
            f"Redis at {self.url} answered {str(reply)[:80]!r} to a claim script call of {jobs} "
            "jobs, which anarchon's scripts never answer"
        )

    async def _decided(
        self,
        script: Script,
        option: str,
        requests: Sequence[ClaimRequest],
        decide: Callable[[ClaimRequest, str], T],
    ) -> list[T]:
        """`decide(request, answer)` for each request and its answer from the claim `script`
        (``batch.lua``), in order. Up to `BATCH` jobs per call, the calls sent one after another
        on one connection: the next is packed, and the answers of the one before are decided,
        while Redis runs one. Each call is atomic; a batch as a whole is not all-or-nothing. An
        ``error`` answer or an error reply is raised as that job's claim alone would raise it,
        once the whole batch is decided."""
        chunks = (
            [requests]
            if len(requests) <= BATCH
            else [requests[i : i + BATCH] for i in range(0, len(requests), BATCH)]
        )
        done: list[list[T]] = [[] for _ in chunks]
        failed: list[tuple[str, Exception]] = []

        def calls() -> Iterator[bytes]:
            for chunk in chunks:
                yield self._call(script, option, chunk)

        def take(i: int, reply: Any) -> None:
            chunk = chunks[i]
            if isinstance(reply, Exception):
                failed.append((chunk[0].job, reply))
                return
            lines = reply.split("\n") if isinstance(reply, str) else []
            if len(lines) != len(chunk):
                failed.append((chunk[0].job, self._odd(reply, len(chunk))))
                return
            if reply.startswith("error ") or "\nerror " in reply:
                for request, line in zip(chunk, lines, strict=True):
                    if line.startswith("error "):
                        failed.append((request.job, rex.ResponseError(unquote(line[6:]))))
                        return
            try:
                done[i] = [decide(r, line) for r, line in zip(chunk, lines, strict=True)]
            except AnarchonError as exc:  # corrupt data, or a claim refused (C5: ConfigError)
                failed.append((chunk[0].job, exc))

        try:
            await script.send(self.client, calls(), take, self._functions)
        except (rex.RedisError, OSError, UnicodeDecodeError) as exc:
            await self._refuse(requests[0].job, exc)
        if failed:
            await self._refuse(*failed[0])
        return [claim for chunk in done for claim in chunk]

    async def open(self) -> None:
        if self._client is not None:
            return
        client = make_client(self.url, self.options)
        try:
            await ping(client, self.url)
            with translated(self.url):
                await self._prepare(client)
        except BaseException:
            await client.aclose()
            raise
        self._client = client

    async def _prepare(self, client: aioredis.Redis) -> None:
        """Strategy-specific setup on open (load scripts, check server support)."""

    async def close(self) -> None:
        client, self._client = self._client, None
        if client is not None:
            await client.aclose()

    async def now_ms(self) -> int:
        with translated(self.url):
            return await server_now_ms(self.client)
