"""`ServerHarness`: the harness base for a store on a shared server (a database, Redis, a broker).

The server's URL comes from ``--anarchon-url``, else the environment variable the harness names,
else its default; the harness skips with the reason when the server does not answer. Every
prefix the kit uses is made unique to the test (``conformance-<run id>``), so tests share one
server, one schema or one table without meeting each other's runs, and `cleanup` drops exactly
the prefixes the test used.
"""

from __future__ import annotations

import os
from typing import Any, ClassVar
from urllib.parse import parse_qsl, urlencode, urlsplit, urlunsplit

import pytest

from anarchon import ClaimStore, connect

from ._harness import DEFAULT_PREFIX, BackendHarness

__all__ = ["ServerHarness"]


class ServerHarness(BackendHarness):
    """Implement `capabilities`, `ping`, `drop_prefix` and the backdoors `force_expire` and
    `raw_run`; the backdoors receive the kit's prefix and read and write ``self.mine(prefix)``,
    the prefix the store under test really used. Optionally `store_options` (query parameters
    of the backend's own, added to every URL) and `close_backdoor`.
    """

    url_env: ClassVar[str] = ""
    """The environment variable holding the server's URL (``ANARCHON_TEST_MARIADB_URL``)."""
    default_url: ClassVar[str] = ""
    """The server's URL when neither ``--anarchon-url`` nor `url_env` gives one."""
    default_port: ClassVar[int] = 0
    """The port of a URL that names none."""

    def __init__(self, url: str | None = None) -> None:
        super().__init__(url)
        self.used: set[str] = set()
        """The prefixes (as mapped by `mine`) the test's stores and backdoors used."""

    # -- the server -----------------------------------------------------------------------------
    def server_url(self) -> str:
        """``--anarchon-url``, else the environment variable `url_env`, else `default_url`."""
        return self.given_url or (self.url_env and os.environ.get(self.url_env)) or self.default_url

    def store_options(self) -> dict[str, str]:
        """Query parameters of the backend's own added to every URL (``{"table": "t1"}``)."""
        return {}

    def url(self, address: tuple[str, int] | None = None) -> str:
        parts = urlsplit(self.server_url())
        netloc = parts.netloc
        if address is not None:
            userinfo = netloc.rpartition("@")[0]
            netloc = f"{userinfo}@" if userinfo else ""
            netloc += f"{address[0]}:{address[1]}"
        query = urlencode([*parse_qsl(parts.query), *self.store_options().items()])
        return urlunsplit((parts.scheme, netloc, parts.path, query, ""))

    def address(self) -> tuple[str, int] | None:
        parts = urlsplit(self.server_url())
        return parts.hostname or "127.0.0.1", parts.port or self.default_port

    # -- prefixes -------------------------------------------------------------------------------
    def mine(self, prefix: str = DEFAULT_PREFIX) -> str:
        """The prefix the kit's `prefix` stands for in this test: unique to this harness."""
        mapped = f"{prefix}-{self.run_id}"
        self.used.add(mapped)
        return mapped

    async def open_store(
        self,
        *,
        prefix: str = DEFAULT_PREFIX,
        address: tuple[str, int] | None = None,
        **options: Any,
    ) -> ClaimStore:
        store = await connect(self.url(address), prefix=self.mine(prefix), **options)
        self._stores.append(store)
        return store

    # -- hooks ----------------------------------------------------------------------------------
    async def ping(self) -> None:
        """Reach the server (open the backdoor connection); raise if it does not answer."""

    async def drop_prefix(self, prefix: str) -> None:
        """Delete everything stored under `prefix` (a mapped one, or `process_prefix`)."""

    async def close_backdoor(self) -> None:
        """Close what `ping` opened."""

    # -- lifecycle ------------------------------------------------------------------------------
    async def setup(self) -> None:
        try:
            await self.ping()
        except Exception as exc:  # noqa: BLE001 - whatever the driver raises: skip, with it
            where = f" (set {self.url_env})" if self.url_env else ""
            pytest.skip(f"no server at {self.server_url()}{where}: {exc}")

    async def cleanup(self) -> None:
        """Close the kit's stores, drop every prefix the test used (and the C1 process check's
        `process_prefix`), close the backdoor."""
        await super().cleanup()
        try:
            for prefix in sorted({*self.used, self.process_prefix}):
                await self.drop_prefix(prefix)
        finally:
            await self.close_backdoor()
