"""`anarchon.once()`: the claim alone, for applications that keep their own scheduler."""

from __future__ import annotations

import asyncio
import functools
import inspect
import time
from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import AbstractAsyncContextManager, asynccontextmanager
from types import TracebackType
from typing import Any, ParamSpec, TypeVar, overload

from .._claims import ClaimRequest, Overlap
from .._connect import create_store
from .._durations import DurationLike, to_ms
from .._errors import ConfigError
from .._names import check_name
from ..abc import ClaimStore
from ..plugins import plugin_manager
from .background import LoopThread
from .claimer import Claimer
from .clock import StoreClock, SystemClock
from .context import RuntimeContext
from .execution import Execution
from .handle import Run
from .jobs import DEFAULT_LEASE_MS, JobSpec
from .settings import default_instance_id
from .shared_stores import SHARED_STORES
from .store_health import StoreHealth

__all__ = ["once"]

P = ParamSpec("P")
R = TypeVar("R")


class BodyInterrupted(Exception):
    """What a run of sync `once` records when its block was left by KeyboardInterrupt or
    SystemExit (which propagate unchanged)."""


class _Once:
    """Returned by `once()`: a context manager (sync and async) and a decorator (of sync and
    async functions)."""

    def __init__(
        self,
        store: str | ClaimStore,
        job: str,
        slot: int | None,
        *,
        every: DurationLike,
        instance: str | None,
        lease: DurationLike | None,
        max_late: DurationLike | None,
        attempts: int,
        timeout: DurationLike | None = None,
    ) -> None:
        self.store = store
        self.job = check_name(job)
        if slot is not None and (isinstance(slot, bool) or not isinstance(slot, int) or slot < 0):
            raise ConfigError(f"slot must be epoch milliseconds (an int >= 0), got {slot!r}")
        self.slot = slot
        self.every_ms = to_ms(every, what="every")
        self.instance = instance or default_instance_id()
        self.lease_ms = to_ms(lease, what="lease") if lease is not None else DEFAULT_LEASE_MS
        if max_late is not None:
            self.max_late_ms = to_ms(max_late, what="max_late", allow_zero=True)
        else:  # a period's slot may be claimed all through the period
            self.max_late_ms = self.every_ms if slot is None else 60_000
        self.attempts = attempts
        self.timeout_ms = to_ms(timeout, what="timeout") if timeout is not None else None
        self._context: AbstractAsyncContextManager[Run | None] | None = None
        self._loop_thread: LoopThread | None = None

    def _slot(self) -> int:
        if self.slot is not None:
            return self.slot
        now = time.time_ns() // 1_000_000
        return now - now % self.every_ms

    @asynccontextmanager
    async def _run(self, shared: ClaimStore | None = None) -> AsyncIterator[Run | None]:
        """Claim, and execute the run while the block runs. `shared`: the store to use as it
        is (sync use); else `self.store`, opened and closed here when it is a URL."""
        owns = shared is None and isinstance(self.store, str)
        if shared is not None:
            store = shared
        else:
            store = create_store(self.store) if isinstance(self.store, str) else self.store
        if owns:
            await store.open()
        try:
            events = plugin_manager()
            context = RuntimeContext(
                store=store,
                # Never measured: the instance's own clock (offset 0) picks the slot.
                clock=StoreClock(SystemClock(), store.now_ms),
                health=StoreHealth(str(getattr(store, "url", type(store).__name__)), events),
                events=events,
                instance=self.instance,
            )
            claimer = Claimer(context)
            request = ClaimRequest(
                job=self.job,
                slot=self._slot(),
                instance=self.instance,
                lease_ms=self.lease_ms,
                max_late_ms=self.max_late_ms,
                overlap=Overlap.ALLOW,
                attempts=self.attempts,
            )
            sent_at = time.monotonic()
            claim = await claimer.claim(store.claim, request)
            if not claim.won:
                yield None
                return
            body_done: asyncio.Future[None] = asyncio.get_running_loop().create_future()
            outcome: dict[str, BaseException] = {}

            async def wait_for_body(run: Run) -> None:
                # Shielded: fencing cancels this task, which must not cancel the future.
                await asyncio.shield(body_done)
                if "error" in outcome:
                    raise outcome["error"]

            spec = JobSpec(
                name=self.job,
                schedule=None,
                func=wait_for_body,
                is_async=True,
                takes_run=True,
                lease_ms=self.lease_ms,
                heartbeat_ms=max(self.lease_ms // 3, 10),
                max_late_ms=self.max_late_ms,
                overlap=Overlap.ALLOW,
                attempts=self.attempts,
                timeout_ms=self.timeout_ms,
            )
            execution = Execution(context, spec=spec, request=request, claim=claim, sent_at=sent_at)
            task = asyncio.create_task(execution())
            try:
                yield execution.run
            except BaseException as exc:
                outcome["error"] = exc
                body_done.set_result(None)
                await task
                raise
            body_done.set_result(None)
            await task
        finally:
            if owns:
                await store.close()

    def _enter_once(self) -> None:
        if self._context is not None:
            raise RuntimeError("once(...) is entered once; call once() again for another block")

    async def __aenter__(self) -> Run | None:
        self._enter_once()
        self._context = self._run()
        return await self._context.__aenter__()

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> bool | None:
        assert self._context is not None
        return await self._context.__aexit__(exc_type, exc, tb)

    def __enter__(self) -> Run | None:
        """Sync use: claim on this process's shared store and loop thread (`SHARED_STORES`)."""
        self._enter_once()
        try:
            asyncio.get_running_loop()
        except RuntimeError:
            pass
        else:
            raise RuntimeError(
                "`with anarchon.once(...)` blocks, and this thread runs an event loop; in async "
                "code use `async with anarchon.once(...)`"
            )
        if isinstance(self.store, str):
            loop_thread, store = SHARED_STORES.store(self.store)
        else:
            loop_thread, store = SHARED_STORES.loop_thread(), self.store
        context = self._run(store)
        run = loop_thread.run(context.__aenter__())
        self._context, self._loop_thread = context, loop_thread
        return run

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> bool | None:
        assert self._context is not None and self._loop_thread is not None
        context, loop_thread = self._context, self._loop_thread
        if exc is None or isinstance(exc, Exception):
            return loop_thread.run(context.__aexit__(exc_type, exc, tb))
        # KeyboardInterrupt, SystemExit: raised in a task, they would end the loop thread, so
        # the run learns of a stand-in, and the original goes on up here.
        stand_in = BodyInterrupted(f"interrupted by {type(exc).__name__}")
        try:
            loop_thread.run(context.__aexit__(BodyInterrupted, stand_in, tb))
        except BodyInterrupted:
            pass
        return None

    @overload
    def __call__(self, func: Callable[P, Awaitable[R]]) -> Callable[P, Awaitable[R | None]]: ...

    @overload
    def __call__(self, func: Callable[P, R]) -> Callable[P, R | None]: ...

    def __call__(self, func: Callable[P, Any]) -> Callable[P, Any]:
        settings: dict[str, Any] = {
            "store": self.store,
            "job": self.job,
            "slot": self.slot,
            "every": self.every_ms,
            "instance": self.instance,
            "lease": self.lease_ms,
            "max_late": self.max_late_ms,
            "attempts": self.attempts,
            "timeout": self.timeout_ms,
        }

        if inspect.iscoroutinefunction(func):

            @functools.wraps(func)
            async def guarded(*args: P.args, **kwargs: P.kwargs) -> Any:
                async with _Once(**settings) as run:
                    if run is None:
                        return None
                    return await func(*args, **kwargs)

            return guarded

        @functools.wraps(func)
        def guarded_sync(*args: P.args, **kwargs: P.kwargs) -> Any:
            with _Once(**settings) as run:
                if run is None:
                    return None
                return func(*args, **kwargs)

        return guarded_sync


def once(
    store: str | ClaimStore,
    job: str,
    slot: int | None = None,
    *,
    every: DurationLike = "1m",
    instance: str | None = None,
    lease: DurationLike | None = None,
    max_late: DurationLike | None = None,
    attempts: int = 1,
    timeout: DurationLike | None = None,
) -> _Once:
    """Run a block (or a decorated function) on one instance only, for this slot.

    ``slot`` defaults to now rounded down to `every` (one minute), so cron on every host, or
    APScheduler on every replica, runs the body once per minute in the whole cluster; such a slot
    may be claimed all through its period (`max_late` defaults to `every`, or to 60 s when a slot
    is given)::

        async with anarchon.once(store, "nightly-report") as run:
            if run:  # None unless this instance won
                await build_report(run.fencing_token)

    Sync code uses ``with`` the same way::

        with anarchon.once("sqlite:///anarchon.db", "nightly-report") as run:
            if run:
                build_report(run.fencing_token)

    On lease stores the winner heartbeats while the body runs, and the run is finished as
    succeeded or failed (with the exception text) when it ends; `run.fenced` tells whether the
    lease was lost.

    With `timeout`, a block that runs longer is fenced (`run.fenced` turns True and
    `run.ensure_held()` raises `Fenced`, "timed out after ..."), and the run is recorded failed
    (``timeout: ran longer than ...``) at once, its lease over; the block itself is not
    interrupted, in sync and async code alike: it goes on until it checks, or ends.

    As a decorator of a sync or an async function, the function returns None on
    instances that did not win.

    Given a URL, ``async with`` opens the store for the block and closes it after; sync use
    opens it once per process (a fork child opens its own) on a background event loop thread,
    which also renews the lease while the body runs in the caller's thread, and closes it at
    interpreter exit. ``with`` inside a running event loop raises `RuntimeError`: use ``async
    with`` there.
    """
    return _Once(
        store,
        job,
        slot,
        every=every,
        instance=instance,
        lease=lease,
        max_late=max_late,
        attempts=attempts,
        timeout=timeout,
    )
