"""`anarchon.connect(url, **options)`: pick the backend by URL scheme, build and open it."""

from __future__ import annotations

from collections.abc import Awaitable, Generator
from types import TracebackType
from typing import Any

from ._options import structure_options
from ._urls import StoreURL
from .abc import ClaimStore
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


class _Connecting(Awaitable[ClaimStore]):
    """Awaitable and async context manager: ``store = await connect(url)`` or
    ``async with connect(url) as store:`` (closed on exit)."""

    def __init__(self, store: ClaimStore) -> None:
        self._store = store

    def __await__(self) -> Generator[Any, None, ClaimStore]:
        return self._open().__await__()

    async def _open(self) -> ClaimStore:
        await self._store.open()
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


def connect(url: str | StoreURL, **options: Any) -> _Connecting:
    """Open the store at `url`: ``store = await anarchon.connect("sqlite:///anarchon.db")``.

    Also an async context manager that closes the store on exit. The scheme picks the backend
    among installed plugins (``anarchon backends`` lists them); options are the URL's query
    parameters and keyword arguments, for example ``connect("redis://localhost/0", prefix="app")``.
    Bad input raises `ConfigError` before anything is opened; an unreachable store raises
    `StoreUnavailable`.
    """
    return _Connecting(create_store(url, **options))
