"""`anarchon.connect(url, **options)`: pick the backend by URL scheme, build and open it (or
open it read-only, rule R1)."""

from __future__ import annotations

import contextlib
from collections.abc import Awaitable, Generator
from types import TracebackType
from typing import Any

from ._errors import ConfigError
from ._options import structure_options
from ._urls import StoreURL
from .abc import ClaimStore, SupportsReadOnly
from .plugins import plugin_manager

__all__ = ["connect", "create_store"]


def create_store(url: str | StoreURL, **options: Any) -> ClaimStore:
    """Build the store for `url` without opening it. Options come from the URL's query and from
    keyword arguments (which win); unknown or ill-typed options are a `ConfigError`."""
    parsed = url if isinstance(url, StoreURL) else StoreURL.parse(url)
    info = plugin_manager().backend(parsed.scheme)
    cls = info.load()
    merged: dict[str, Any] = {**parsed.options(), **options}
    opts = structure_options(cls.Options, merged, where=f"{parsed.scheme}://")
    return cls.from_url(parsed, opts)


def _cannot_read_only(store: ClaimStore, url: StoreURL) -> ConfigError:
    """The error of ``connect(url, read_only=True)`` for a store without `SupportsReadOnly`."""
    return ConfigError(
        f"{url.scheme}:// ({type(store).__module__}.{type(store).__qualname__}) cannot open a "
        "store read-only: it does not implement anarchon.abc.SupportsReadOnly, so opening it "
        "could create its schema, streams or queues. Read-only commands (history, status, "
        "dashboard) refuse it rather than change the store; ask the backend's maintainers for "
        "open_read_only, or read it from Python with anarchon.connect(url), which opens it as a "
        "scheduler does"
    )


class _Connecting(Awaitable[ClaimStore]):
    """Awaitable and async context manager: ``store = await connect(url)`` or
    ``async with connect(url) as store:`` (closed on exit)."""

    def __init__(self, store: ClaimStore, url: StoreURL, *, read_only: bool = False) -> None:
        self._store = store
        self._url = url
        self._read_only = read_only

    def __await__(self) -> Generator[Any, None, ClaimStore]:
        return self._open().__await__()

    async def _open(self) -> ClaimStore:
        if not self._read_only:
            await self._store.open()
            return self._store
        store = self._store
        if not isinstance(store, SupportsReadOnly):
            raise _cannot_read_only(store, self._url)
        try:
            await store.open_read_only()
        except BaseException:
            # StoreNotSetUp and the like: whatever the store connected is let go here, so a
            # caller that got an error has nothing to close.
            with contextlib.suppress(Exception):
                await self._store.close()
            raise
        return self._store

    async def __aenter__(self) -> ClaimStore:
        return await self._open()

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        await self._store.close()


def connect(url: str | StoreURL, *, read_only: bool = False, **options: Any) -> _Connecting:
    """Open the store at `url`: ``store = await anarchon.connect("sqlite:///anarchon.db")``.

    Also an async context manager that closes the store on exit. The scheme picks the backend
    among installed plugins (``anarchon backends`` lists them); options are the URL's query
    parameters and keyword arguments, for example ``connect("redis://localhost/0", prefix="app")``.
    Bad input raises `ConfigError` before anything is opened; an unreachable store raises
    `StoreUnavailable`.

    With ``read_only=True`` the store is opened with `SupportsReadOnly.open_read_only` (rule
    R1): nothing is created or changed, `StoreNotSetUp` says the store holds no anarchon data
    under these options, and only `history`, `now_ms` and `jobs` may be called. A backend
    without `SupportsReadOnly` is a `ConfigError`: it is never opened the ordinary way instead,
    since that could create its schema in a store meant to be only read.
    """
    parsed = url if isinstance(url, StoreURL) else StoreURL.parse(url)
    return _Connecting(create_store(parsed, **options), parsed, read_only=read_only)
