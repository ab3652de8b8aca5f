"""The connection to Redis: building the redis-py client, loading scripts, and turning driver
exceptions into anarchon's errors (DESIGN 11)."""

from __future__ import annotations

import asyncio
import hashlib
from collections.abc import Awaitable, Callable, Iterable, Iterator, Sequence
from contextlib import contextmanager
from importlib.resources import files
from typing import Any, TypeVar, cast

import redis.asyncio as aioredis
import redis.exceptions as rex

from anarchon.backend import (
    AnarchonError,
    ConfigError,
    StoreCorrupt,
    StoreUnavailable,
    StoreURL,
    tls_error,
)

from . import _wire as wire
from ._keys import JobKeys

__all__ = ["Script", "check_types", "reraising", "server_now_ms", "translated"]

T = TypeVar("T")

OPEN_TRIES = 3
"""`open` tries to reach the server this often (0.2 s apart) before it gives up."""


async def ping(client: aioredis.Redis, url: StoreURL) -> None:
    for attempt in range(OPEN_TRIES):
        try:
            await client.ping()
            return
        except rex.AuthenticationError as exc:  # a ConnectionError, but no retry will change it
            raise ConfigError(str(refused_credentials(url, exc))) from None
        except (rex.ConnectionError, rex.TimeoutError, OSError) as exc:
            tls = tls_error(
                exc,
                f"Redis at {url}",
                ca_option="tls_ca_file",
                cert_options="tls_cert_file and tls_key_file (tls-auth-clients yes)",
                tls=url.scheme == "rediss",
            )
            if isinstance(tls, ConfigError):
                raise tls from None
            if attempt == OPEN_TRIES - 1:
                raise tls or StoreUnavailable(
                    f"Redis at {url} did not answer after {OPEN_TRIES} tries ({exc}): is the server "
                    "running and the URL right (redis://host:6379/0, rediss:// for TLS)?"
                ) from None
            await asyncio.sleep(0.2)
        except rex.InvalidResponse as exc:
            raise not_redis(url, exc) from None


def refused_credentials(url: StoreURL, exc: Exception) -> StoreUnavailable:
    """The error for a server that does not accept the URL's user and password (or none). At
    open it is raised as a `ConfigError` (the scheduler fails its start at once); on a reconnect
    it stays `StoreUnavailable`, since the server's users may be put right while it runs."""
    what = (
        "asks for a password and the URL gives none"
        if url.password is None
        else "refused the URL's user and password"
    )
    return StoreUnavailable(
        f"Redis at {url} {what} ({exc}): put the right ones in the URL, "
        "redis://user:password@host:6379/0 (or redis://:password@host:6379/0 without ACL users)"
    )


def not_redis(url: StoreURL, exc: Exception) -> StoreUnavailable:
    """The error for an answer that is not in Redis's protocol (RESP)."""
    return StoreUnavailable(
        f"Redis at {url} answered something that is not the Redis protocol ({exc}): is this "
        "port a Redis server's (redis://host:6379/0), and is it TLS (then rediss://)?"
    )


def _script_source(name: str) -> str:
    return files("anarchon_redis").joinpath("_scripts").joinpath(name).read_text(encoding="utf-8")


class Script:
    """A Lua script from ``_scripts/``: loaded once at `open`, run with EVALSHA, sent whole again
    when the server answers NOSCRIPT (a restart or SCRIPT FLUSH forgot it). A claim script
    (`claims`) gets ``batch.lua`` in front: what the claim scripts share.

    A script whose body defines one function, `entry`, can also be a Redis function (Redis 7+,
    Valkey): the library is loaded once per server and called with FCALL, and its helpers are
    defined once when it loads instead of on every call (about 9 µs less per lease claim here).
    Library and function are named after the script's SHA1, so instances running different
    versions each call their own."""

    def __init__(self, name: str, *, claims: bool = False, entry: str | None = None) -> None:
        self.name = name
        body = (_script_source("batch.lua") if claims else "") + _script_source(name)
        self.source = body + (f"\nreturn {entry}()\n" if entry else "")
        self.sha = hashlib.sha1(self.source.encode()).hexdigest()  # Redis names scripts by SHA1
        self.eval_head = f"$7\r\nEVALSHA\r\n$40\r\n{self.sha}\r\n"
        self.function = f"anarchon_{entry}_{self.sha[:16]}" if entry else None
        self.fcall_head = f"$5\r\nFCALL\r\n{wire.bulk(self.function)}" if self.function else ""
        self.library = (
            f"#!lua name={self.function}\nlocal KEYS, ARGV\n{body}\n"
            f"redis.register_function('{self.function}', function(keys, args)\n"
            f"  KEYS, ARGV = keys, args\n  return {entry}()\nend)\n"
        )

    async def load(self, client: aioredis.Redis, functions: bool = False) -> None:
        await client.script_load(self.source)
        if functions:
            await client.function_load(self.library, replace=True)

    async def load_function(self, client: aioredis.Redis) -> bool:
        """Load the script, and its library where the server has functions and the user may
        load them; whether FCALL is to be used."""
        await self.load(client)
        if self.function is None:
            return False
        try:
            await client.function_load(self.library, replace=True)
        except rex.NoPermissionError:
            return False  # ACL without +function|load: scripts only
        except rex.ResponseError as exc:
            if "unknown command" in str(exc).lower():
                return False  # before Redis 7
            raise
        return True

    @staticmethod
    def missing(reply: object) -> bool:
        """The server does not know the script or function any more (a restart, SCRIPT FLUSH,
        FUNCTION FLUSH)."""
        return isinstance(reply, rex.NoScriptError) or (
            isinstance(reply, rex.ResponseError) and "Function not found" in str(reply)
        )

    async def __call__(self, client: aioredis.Redis, keys: list[str], args: list[Any]) -> Any:
        try:
            return await client.evalsha(self.sha, len(keys), *keys, *args)
        except rex.NoScriptError:
            return await client.eval(self.source, len(keys), *keys, *args)

    async def send(
        self,
        client: aioredis.Redis,
        commands: Iterable[bytes],
        take: Callable[[int, Any], None],
        functions: bool = False,
        pool: wire.Pool | None = None,
        tail: Sequence[bytes] = (),
    ) -> list[Any]:
        """Calls of this script packed by hand (`_wire`), sent on one connection in order;
        `take(i, reply)` gets each call's reply (an error reply as its exception) as soon as it
        is read. Calls answered NOSCRIPT (a restart or SCRIPT FLUSH forgot the script) are sent
        again once it is loaded, and taken then. `pool`: where to send them (a cluster node's),
        default the client's pool.

        `tail`: the durability commands (`_durability.Confirm.commands`), sent after
        the last call (and again after the calls sent again); their replies are returned."""
        where = pool if pool is not None else cast("wire.Pool", client.connection_pool)
        sent: list[bytes] = []
        missing: list[int] = []
        tails = len(tail)

        def kept() -> Iterator[bytes]:
            for packed in commands:
                sent.append(packed)
                yield packed
            yield from tail

        def first(i: int, reply: Any) -> None:
            if i >= len(sent):
                return
            if self.missing(reply):
                missing.append(i)
            else:
                take(i, reply)

        replies = await wire.send(where, kept(), first)
        if missing:
            await self.load(client, functions)
            again = [sent[i] for i in missing]
            replies = await wire.send(
                where,
                [*again, *tail],
                lambda j, reply: take(missing[j], reply) if j < len(again) else None,
            )
        return replies[len(replies) - tails :] if tails else []


def reraising(exc: Exception) -> Callable[[], Awaitable[Any]]:
    """A call that raises `exc`: to pass an error met outside `guarded` through it."""

    async def again() -> Any:
        raise exc

    return again


async def server_now_ms(client: aioredis.Redis) -> int:
    seconds, micros = await client.time()
    return int(seconds) * 1000 + int(micros) // 1000


@contextmanager
def translated(url: StoreURL, keys: JobKeys | None = None) -> Iterator[None]:
    """Driver errors as anarchon errors: transport failures are `StoreUnavailable` (the claim may
    be resent), our scripts' corruption reports and WRONGTYPE are `StoreCorrupt`."""
    try:
        yield
    except AnarchonError:
        raise
    except rex.AuthenticationError as exc:  # on a reconnect: the password changed meanwhile
        raise refused_credentials(url, exc) from None
    except (rex.ConnectionError, rex.TimeoutError, OSError) as exc:
        raise StoreUnavailable(f"Redis at {url} failed: {exc}") from None
    except rex.InvalidResponse as exc:
        raise not_redis(url, exc) from None
    except UnicodeDecodeError as exc:  # the driver decodes every reply (decode_responses)
        raise StoreCorrupt(
            f"Redis at {url}: "
            + (f"a key of job {keys.job!r}" if keys else "a reply")
            + f" holds bytes that are not UTF-8 text ({exc.reason} at byte {exc.start}); "
            "anarchon writes only UTF-8: remove or repair the value, or use another prefix"
        ) from None
    except (rex.AskError, rex.TryAgainError, rex.ClusterError, rex.RedisClusterException) as exc:
        # MOVED is an AskError. Cluster errors subclass ResponseError: caught before it.
        raise StoreUnavailable(
            f"Redis at {url}: {exc}. In a Redis Cluster this is a failover or resharding in "
            "progress (the claim may be resent); if the server is a cluster node, write "
            "redis+cluster://host:port"
        ) from None
    except rex.ReadOnlyError:
        raise StoreUnavailable(
            f"Redis at {url} is a read-only replica: point the URL at the primary (after a "
            "failover, the new one); the claim may be resent"
        ) from None
    except rex.ResponseError as exc:
        text = str(exc)
        if "ANARCHON-CORRUPT" in text:
            detail = text.split("ANARCHON-CORRUPT", 1)[1].split(" script:")[0].strip()
            raise StoreCorrupt(
                f"Redis at {url}: {detail}; anarchon did not write this: remove the key or use "
                "another prefix"
            ) from None
        if "WRONGTYPE" in text:
            raise StoreCorrupt(
                f"Redis at {url}: a key of job {keys.job!r} holds another type than anarchon "
                f"writes ({text.split(' script:')[0]})"
                if keys
                else f"Redis at {url}: {text}"
            ) from None
        raise


async def check_types(
    client: aioredis.Redis, url: StoreURL, keys: JobKeys, wanted: list[str]
) -> None:
    """After a WRONGTYPE: name the key that holds foreign data (DESIGN 11)."""
    expected = keys.expected_types()
    pipe = client.pipeline(transaction=False)
    for key in wanted:
        pipe.type(key)
    with translated(url):
        found = await pipe.execute()
    for key, kind in zip(wanted, found, strict=True):
        if kind != "none" and kind != expected[key]:
            raise StoreCorrupt(
                f"Redis key {key} at {url} is a {kind}, anarchon keeps a {expected[key]} there: "
                "another program uses this key; remove it or use another prefix"
            )


async def guarded(
    client: aioredis.Redis,
    url: StoreURL,
    keys: JobKeys,
    wanted: list[str],
    call: Callable[[], Awaitable[T]],
) -> T:
    """Run `call` with errors translated; a WRONGTYPE is reported with the offending key's name.
    A read-only replica's refusal closes the pool's connections, so the next command connects
    anew: the URL's name may lead to the new primary after a failover."""
    try:
        with translated(url, keys):
            try:
                return await call()
            except rex.ReadOnlyError:
                await client.connection_pool.disconnect()
                raise
    except StoreCorrupt as exc:
        if "holds another type" in str(exc):
            await check_types(client, url, keys, wanted)
        raise
