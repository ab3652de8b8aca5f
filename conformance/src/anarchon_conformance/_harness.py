"""`BackendHarness`: the one class a backend author writes to certify a store."""

from __future__ import annotations

import abc
import importlib
import uuid
from collections.abc import Sequence
from typing import Any, ClassVar

from anarchon import Capabilities, ClaimStore, RunRecord, connect
from anarchon.plugins import plugin_manager

__all__ = ["DEFAULT_PREFIX", "BackendHarness"]

DEFAULT_PREFIX = "conformance"
"""The prefix of the stores the kit opens unless a test asks for another one."""


class BackendHarness(abc.ABC):
    """How the kit reaches one backend. One instance serves one test, on one fresh, isolated store.

    Implement `url` (or override `open_store`), `capabilities`, and the two backdoors
    `force_expire` and `raw_run`, which must read and write the store *directly*, bypassing the
    store class under test: they are the kit's independent oracle. Optionally `setup`, `cleanup`,
    `server_version`, `address`/`process_url` (network and multi-process checks).

    The kit calls ``harness_class(url)`` with the value of ``--anarchon-url`` (None when not given),
    then `setup()`, the test, and `cleanup()`.
    """

    name: ClassVar[str] = ""
    """Backend name shown on the certificate (defaults to the URL scheme)."""

    plugins: ClassVar[Sequence[str]] = ()
    """Modules with ``anarchon_register_backends`` hook implementations to register before
    connecting, for a backend that is not installed through an entry point (also registered in
    the OS processes of the C1 process check)."""

    # -- harness flags: what the kit must know about the store that its capabilities do not say
    host_clock: ClassVar[bool] = False
    """The store's clock is the wall clock of the host the claiming process runs on (SQLite:
    every process sharing the file reads the same host clock). The T1 check, which shifts the
    wall clock of one claiming process, is then not applicable: no process of another host can
    reach the store."""

    claims_in_slot_order: ClassVar[bool] = False
    """A claim of a slot below the newest slot claimed for the job is `late` by design (Redis
    ``stream-id``: a stream only grows). The kit's checks that claim several slots of one job
    then claim them oldest first: C1 races one slot per job, the history check claims in order."""

    def __init__(self, url: str | None = None) -> None:
        self.given_url = url
        """The ``--anarchon-url`` option, or None."""
        self.run_id = uuid.uuid4().hex[:12]
        """Unique per harness instance: use it to name a fresh database, file or key space."""
        self.process_prefix = f"{DEFAULT_PREFIX}-proc-{self.run_id}"
        """The prefix of the C1 process check's claims, which other OS processes make through
        `process_url()` (not through `open_store`): unique per harness instance, so that a run of
        the check never meets the claims of an earlier run in a store that outlives it."""
        self._stores: list[ClaimStore] = []
        register_plugins(self.plugins)

    # -- the store ------------------------------------------------------------------------------
    @abc.abstractmethod
    def url(self, address: tuple[str, int] | None = None) -> str:
        """The URL of this harness's fresh store. It may carry the backend's own options
        (``?table=t1234``, ``?schema=...``); ``prefix`` and the options a check needs
        (``history_limit``, ...) the kit passes as keyword arguments to `anarchon.connect`.

        With `address`, the same store reached through ``host:port`` instead of the server's own
        address: the kit passes its fault-injecting proxy here. Stores without a network (memory,
        SQLite) ignore it and return None from `address()`.
        """

    def address(self) -> tuple[str, int] | None:
        """The server's TCP ``(host, port)``, so the kit can put its proxy in front of it; None
        for a store without a network connection (then the proxy checks are not applicable)."""
        return None

    def process_url(self) -> str | None:
        """A URL another OS process can open to reach the same store, or None when the store lives
        inside this process (``memory://``): the C1 process check is then not applicable, while
        the C1 task check still runs and can never be skipped."""
        return self.url()

    async def open_store(
        self,
        *,
        prefix: str = DEFAULT_PREFIX,
        address: tuple[str, int] | None = None,
        **options: Any,
    ) -> ClaimStore:
        """Open a store object on this harness's store. Every call is a new "instance" (its own
        connections); the kit closes them all at the end of the test.

        The R1 check passes ``read_only=True`` among `options`: an override must hand it to
        `anarchon.connect` (or call ``open_read_only()`` instead of ``open()``). It opens a
        prefix read-only before anything else of the test opened it, so the store `url` names
        must be fresh: nothing created in it before the kit opens it."""
        store = await connect(self.url(address), prefix=prefix, **options)
        self._stores.append(store)
        return store

    # -- what the store can do ------------------------------------------------------------------
    @property
    @abc.abstractmethod
    def capabilities(self) -> Capabilities:
        """The capabilities of the stores `open_store` returns; the kit's checks follow them."""

    async def server_version(self) -> str:
        """The server's name and version for the certificate (``"MariaDB 10.11.6"``)."""
        return "n/a"

    def short_memory(self, remembers_ms: int) -> dict[str, Any] | None:
        """Options for `open_store` under which the store remembers a claim for about
        `remembers_ms` (the ``capabilities.remembers_ms`` of a store opened with them must say
        how long), or None (the default) when its memory cannot be shortened.

        The C5 check (early claims) opens its store with them: it must wait past a store's
        memory to see whether a claim sent before its slot is forgotten while the slot can still
        be claimed, and it waits a few seconds at most. A store that remembers longer, with no
        shorter option, is checked only as far as that budget reaches. Redis ``script`` gives
        ``{"window_ms": remembers_ms}``, NATS ``msg-id`` its ``duplicate_window_ms``."""
        return None

    # -- backdoors (bypass the store class under test) ------------------------------------------
    @abc.abstractmethod
    async def force_expire(self, job: str, slot: int, *, prefix: str = DEFAULT_PREFIX) -> None:
        """Make the running run (job, slot) look as if its lease ran out: ``lease_until`` one
        millisecond before the store's now. Called only on a running run.

        A store with no clock of its own (``now_ms()`` is None, ``store_clock=False``) judges a
        lease by the clock of the instance that asks (T1): "now" is then this process's wall
        clock (``time.time_ns() // 1_000_000``), the clock of every instance the kit runs."""

    @abc.abstractmethod
    async def raw_run(
        self, job: str, slot: int, *, prefix: str = DEFAULT_PREFIX
    ) -> RunRecord | None:
        """What the store really holds for (job, slot), read directly; None if nothing."""

    # -- lifecycle ------------------------------------------------------------------------------
    async def setup(self) -> None:  # noqa: B027 - optional hook
        """Create the fresh, isolated store (a database, a file, a key space)."""

    async def cleanup(self) -> None:
        """Close the stores the kit opened, then drop what `setup` created. Extend, calling
        ``await super().cleanup()`` first."""
        stores, self._stores = self._stores, []
        for store in stores:
            await store.close()

    @property
    def backend_name(self) -> str:
        return self.name or self.url().split("://", 1)[0]


_registered: set[str] = set()


def register_plugins(modules: Sequence[str]) -> None:
    """Register backend plugin modules with anarchon's plugin manager, once each."""
    for name in modules:
        if name in _registered:
            continue
        manager = plugin_manager()
        if name not in manager.plugin_names():
            try:
                manager.register(importlib.import_module(name), name=name)
            except ValueError:
                pass  # installed too: its entry point registered the same module already
        _registered.add(name)
