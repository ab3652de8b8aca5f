"""The store on an event loop of its own, in a thread, for beat's synchronous loop.

Beat calls `claim` and waits for the answer only as long as it chooses; the claim goes on in
the thread (resent with the same token while the store is down, C2, until the slot turns late),
and beat picks its answer up later. One store connection serves the whole beat process.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import logging
from collections.abc import Coroutine, Sequence
from concurrent.futures import Future
from typing import Any, TypeVar

from ..._claims import Claim, ClaimRequest
from ..._errors import ConfigError, StoreCorrupt, StoreUnavailable
from ..._runs import RunStatus
from ..._runtime.background import LoopThread
from ..._runtime.claimer import TRANSPORT_ERRORS, Claimer
from ..._runtime.clock import StoreClock, SystemClock
from ..._runtime.context import RuntimeContext
from ..._runtime.jobs import set_up_jobs
from ..._runtime.store_health import StoreHealth
from ..._urls import redact
from ...abc import ClaimStore, LeaseStore
from ...plugins import plugin_manager

__all__ = ["StoreThread"]

log = logging.getLogger("anarchon.celery")

T = TypeVar("T")

_FINISH_TRIES = 5


class StoreThread:
    """A ClaimStore opened and called on an event loop in a daemon thread."""

    def __init__(self, store: ClaimStore, *, store_name: str, instance: str) -> None:
        self.store = store
        self.store_name = store_name
        self.instance = instance
        self.jobs: Sequence[str] = ()
        """The jobs to set up on stores that want it (`SupportsJobSetup`), at the first open."""
        self._opened = False
        self._closed = False
        self._open_lock = asyncio.Lock()
        self._loop_thread = LoopThread("anarchon-beat-store")
        self._loop_thread.start()
        self._claimer: Claimer = self.run(self._make_claimer()).result()

    async def _make_claimer(self) -> Claimer:
        events = plugin_manager()
        context = RuntimeContext(
            store=self.store,
            # Lateness by this node's clock: it never claims a slot ahead of it, and the store
            # judges lateness by its own clock where it has one (T1).
            clock=StoreClock(SystemClock(), self.store.now_ms),
            health=StoreHealth(self.store_name, events),
            events=events,
            instance=self.instance,
        )
        return Claimer(context)

    def run(self, coro: Coroutine[Any, Any, T]) -> Future[T]:
        """Run `coro` on the store's loop; its future answers in beat's thread."""
        return self._loop_thread.submit(coro)

    async def _ensure_open(self) -> None:
        async with self._open_lock:
            if self._opened:
                return
            await self.store.open()
            self._opened = True
            log.info("anarchon: store %s is open", self.store_name)
        await set_up_jobs(self.store, self.jobs, store_name=self.store_name)

    async def _try_open(self) -> None:
        try:
            await self._ensure_open()
        except TRANSPORT_ERRORS as exc:
            log.warning(
                "anarchon: store %s does not answer (%s); beat keeps going, and each claim "
                "retries until its slot turns late: no entry is sent until the store answers",
                self.store_name,
                redact(str(exc)),
            )

    def open(self, timeout_s: float) -> None:
        """Open the store, or log that it is down (claims retry it); `ConfigError` and
        `StoreCorrupt` (a store that can never work) propagate so beat refuses to start."""
        try:
            self.run(self._try_open()).result(timeout_s)
        except concurrent.futures.TimeoutError:
            log.warning(
                "anarchon: store %s did not open within %s s; claims retry it",
                self.store_name,
                timeout_s,
            )

    async def _claim_once(self, request: ClaimRequest) -> Claim:
        await self._ensure_open()
        return await self.store.claim(request)

    async def _claim(self, request: ClaimRequest) -> Claim:
        return await self._claimer.claim(self._claim_once, request)

    def claim(self, request: ClaimRequest) -> Future[Claim]:
        """Claim `request` (resent with its token until decided or late); never raises: a
        store that refuses the claim for good answers `unknown` (C3)."""
        return self.run(self._claim(request))

    async def _finish(
        self, request: ClaimRequest, status: RunStatus, error: str | None, store: LeaseStore
    ) -> None:
        tries = 0

        def give_up() -> bool:
            nonlocal tries
            tries += 1
            return tries >= _FINISH_TRIES

        done = await self._claimer.call(
            "finish",
            lambda: store.finish(request.job, request.slot, request.token, status, error),
            give_up=give_up,
        )
        if done is False:
            log.warning(
                "anarchon: %s@%s was no longer held by this node when it finished (%s)",
                request.job,
                request.slot,
                status,
            )

    def finish(self, request: ClaimRequest, status: RunStatus, error: str | None = None) -> None:
        """On lease stores, record the won run as `status` in the background (the run is the
        send: it is over once ``apply_async`` returned or raised)."""
        if isinstance(self.store, LeaseStore) and not self._closed:
            self.run(self._finish(request, status, error, self.store))

    async def _close(self) -> None:
        self._claimer.stop()
        current = asyncio.current_task()
        pending = [task for task in asyncio.all_tasks() if task is not current]
        if pending:  # finishes under way get a moment; claims give up (they are not resent)
            _, late = await asyncio.wait(pending, timeout=2.0)
            for task in late:
                task.cancel()
            await asyncio.gather(*late, return_exceptions=True)
        try:
            await asyncio.wait_for(self.store.close(), 5.0)
        except (*TRANSPORT_ERRORS, StoreCorrupt, ConfigError) as exc:
            log.debug("anarchon: closing store %s: %s", self.store_name, redact(str(exc)))

    def close(self) -> None:
        """Let finishes end (2 s at most), close the store and stop the thread. Idempotent."""
        if self._closed:
            return
        self._closed = True
        try:
            self.run(self._close()).result(10.0)
        except (concurrent.futures.TimeoutError, StoreUnavailable) as exc:
            log.debug("anarchon: closing store %s: %s", self.store_name, exc)
        finally:
            self._loop_thread.stop(5.0)
