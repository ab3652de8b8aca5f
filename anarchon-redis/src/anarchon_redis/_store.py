"""`RedisStore`: the class `anarchon.connect("redis://...")` builds. It returns the store of the
chosen strategy: `RedisLeaseStore` (a `LeaseStore`) for ``strategy=lease``, and the no-lease
`StreamIdStore`, `IdmpStore` or `ScriptStore` otherwise (not `LeaseStore`s, so the runtime does
not heartbeat their runs)."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, ClassVar

import redis.asyncio as aioredis

from anarchon import ClaimStore, ConfigError, StoreOptions, StoreURL

from ._client import make_client, ping, server_now_ms, translated
from ._keys import JobKeys
from ._options import RedisOptions

if TYPE_CHECKING:
    from typing_extensions import Self

__all__ = ["RedisStore"]

SCHEMES = ("redis", "rediss")


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
        if url.path and not url.path.isdigit():
            raise ConfigError(
                f"Redis URL {url}: the path must be a database number such as /0, got {url.path!r}"
            )
        self.url = url
        self.options: RedisOptions = options
        self._client: aioredis.Redis | None = None

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

    async def open(self) -> None:
        if self._client is not None:
            return
        client = make_client(self.url, self.options.timeout_ms)
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
