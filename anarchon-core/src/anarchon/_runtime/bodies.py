"""How a won run's job body runs: a sync job in its own thread, an async job stepped by hand so
that no step of it runs while its run is fenced (F1)."""

from __future__ import annotations

import asyncio
import logging
import threading
from collections.abc import Callable, Coroutine, Generator
from typing import Any

from .handle import Run

__all__ = ["guarded", "run_in_thread"]

log = logging.getLogger("anarchon.run")


def run_in_thread(name: str, func: Callable[[Run], Any], run: Run) -> asyncio.Future[Any]:
    """Run a sync job in its own daemon thread (never on the loop, never starving a pool)."""
    loop = asyncio.get_running_loop()
    future: asyncio.Future[Any] = loop.create_future()

    def resolve(ok: bool, value: Any) -> None:
        if future.done():
            return
        if ok:
            future.set_result(value)
        else:
            future.set_exception(value)

    def hand_over(ok: bool, value: Any) -> None:
        try:
            loop.call_soon_threadsafe(resolve, ok, value)
        except RuntimeError:
            # The loop is closed: the run was over for the scheduler already (it timed out,
            # or was fenced at shutdown) and nobody waits for this result.
            log.debug("run %s@%s: the job's thread ended after its loop closed", run.job, run.slot)

    def target() -> None:
        try:
            result = func(run)
        except BaseException as exc:  # noqa: BLE001 - handed to the loop, never lost
            hand_over(False, exc)
        else:
            hand_over(True, result)

    threading.Thread(target=target, name=f"anarchon-job-{name}", daemon=True).start()
    return future


class _Guarded:
    """An async job's coroutine, stepped by hand so that each step first checks the lease (F1).

    After a pause longer than the lease (SIGSTOP, a stalled host), the job's own timer may be
    ready before the heartbeat task that would fence it; asyncio could then resume the job for
    one more step although the run is already fenced. Here every resumption of the job is
    preceded by a look at `Run.fenced` (the monotonic deadline too): a fenced run gets
    `CancelledError` thrown in where it waits, so its ``except``/``finally`` run and no step of
    its work does."""

    def __init__(self, coro: Coroutine[Any, Any, Any], run: Run) -> None:
        self.coro = coro
        self.run = run

    def __await__(self) -> Generator[Any, Any, Any]:
        coro, run = self.coro, self.run
        send: Any = None
        error: BaseException | None = None
        cancelled = False  # once: the job's own cleanup may await afterwards
        while True:
            if not cancelled and run.fenced:
                cancelled = True
                error = asyncio.CancelledError(f"fenced: {run.fence_reason}")
            elif isinstance(error, asyncio.CancelledError):
                cancelled = True
            try:
                waiting = coro.send(send) if error is None else coro.throw(error)
            except StopIteration as stop:
                return stop.value
            try:
                send, error = (yield waiting), None
            except BaseException as exc:  # noqa: BLE001 - passed on to the job, as asyncio does
                send, error = None, exc


async def guarded(coro: Coroutine[Any, Any, Any], run: Run) -> Any:
    return await _Guarded(coro, run)
