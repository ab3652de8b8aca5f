"""`LoopThread`: an asyncio event loop in a daemon thread, for sync code (gunicorn and uWSGI
workers, Flask, Django, plain threads) to run anarchon's async machinery on.

Sync code hands coroutines over (`run`, `submit`) and gets their results or exceptions back in
its own thread. The loop belongs to the process that started it: after ``fork()`` the child has
the loop's objects but not its thread, so `forked` tells, and nothing here touches the copy.

`at_exit` runs a callback when the interpreter exits, before the thread pools of
`concurrent.futures` are shut down (stores such as SQLite run their I/O on one), so a shutdown
at exit can still use the store."""

from __future__ import annotations

import asyncio
import atexit
import concurrent.futures
import concurrent.futures.thread  # its exit hook is registered before, and runs after, ours
import os
import threading
from collections.abc import Callable, Coroutine
from typing import Any, TypeVar

__all__ = ["LoopThread", "at_exit"]

T = TypeVar("T")


def at_exit(callback: Callable[[], None]) -> None:
    """Call `callback` at interpreter exit, while thread pools still take work.

    `atexit` callbacks run after `threading` has shut the pools of `concurrent.futures` down;
    `threading._register_atexit` (what those pools use themselves, Python 3.9+) runs before, in
    reverse order of registration (this module imports `concurrent.futures.thread` first, so
    that its hook is registered before, and runs after, ours). Fork children inherit the
    registration: callbacks check the pid themselves."""
    register = getattr(threading, "_register_atexit", None)
    if register is None:  # pragma: no cover - a Python without it
        atexit.register(callback)
        return
    try:
        register(callback)
    except RuntimeError:  # registered during interpreter shutdown: too late to matter
        pass


class LoopThread:
    """An event loop running forever in a daemon thread, started by `start()`.

    >>> loop = LoopThread("anarchon-example")
    >>> loop.start()
    >>> loop.run(asyncio.sleep(0, "done"))
    'done'
    >>> loop.stop()
    """

    def __init__(self, name: str) -> None:
        self.name = name
        self.pid = os.getpid()
        self._loop: asyncio.AbstractEventLoop | None = None
        self._thread: threading.Thread | None = None

    @property
    def forked(self) -> bool:
        """True in a child process forked after this object was made: its loop (if any) and
        thread belong to the parent, and must not be used here."""
        return self.pid != os.getpid()

    @property
    def started(self) -> bool:
        """Started and not stopped, by this process or (after a fork) by the parent."""
        return self._thread is not None

    @property
    def running(self) -> bool:
        """Started, not stopped, in this process."""
        thread = self._thread
        return not self.forked and thread is not None and thread.is_alive()

    @property
    def loop(self) -> asyncio.AbstractEventLoop:
        """The running loop (`RuntimeError` unless `running`)."""
        if not self.running or self._loop is None:
            raise RuntimeError(f"{self.name}: the event loop thread is not running")
        return self._loop

    def in_thread(self) -> bool:
        """True when called on the loop's own thread (where waiting for it would deadlock)."""
        thread = self._thread
        return thread is not None and thread.ident == threading.get_ident()

    def start(self) -> None:
        """Start the loop in a new daemon thread and return once it runs."""
        if self.forked:
            raise RuntimeError(f"{self.name} was made in process {self.pid}, before a fork")
        if self.running:
            return
        loop = asyncio.new_event_loop()
        ready = threading.Event()

        def serve() -> None:
            asyncio.set_event_loop(loop)
            loop.call_soon(ready.set)
            try:
                loop.run_forever()
            finally:
                _close(loop)

        thread = threading.Thread(target=serve, name=self.name, daemon=True)
        self._loop, self._thread = loop, thread
        thread.start()
        ready.wait()

    def submit(self, coro: Coroutine[Any, Any, T]) -> concurrent.futures.Future[T]:
        """Schedule `coro` on the loop; its future, for any thread to wait on."""
        try:
            loop = self.loop
        except RuntimeError:
            coro.close()
            raise
        return asyncio.run_coroutine_threadsafe(coro, loop)

    def run(self, coro: Coroutine[Any, Any, T], timeout: float | None = None) -> T:
        """Run `coro` on the loop and wait for its result (its exception raises here). If the
        wait times out or is interrupted, the coroutine is cancelled."""
        if self.in_thread():
            coro.close()
            raise RuntimeError(
                f"{self.name}: waiting for the loop from its own thread would deadlock; await "
                "the coroutine instead"
            )
        future = self.submit(coro)
        try:
            return future.result(timeout)
        except BaseException:
            future.cancel()
            raise

    def call(self, func: Callable[[], T], timeout: float | None = None) -> T:
        """Call `func` on the loop's thread (where the loop's objects may be read safely)."""

        async def call() -> T:
            return func()

        return self.run(call(), timeout)

    def stop(self, timeout: float | None = None) -> bool:
        """Cancel what still runs on the loop, stop it and join the thread (up to `timeout`
        seconds); True once the thread has ended. In a fork child it only forgets the
        parent's loop."""
        loop, thread = self._loop, self._thread
        if self.forked or loop is None or thread is None:
            self._loop = self._thread = None
            return True
        if thread.is_alive() and not loop.is_closed():
            loop.call_soon_threadsafe(loop.stop)
        if self.in_thread():
            return False
        thread.join(timeout)
        if thread.is_alive():
            return False
        self._loop = self._thread = None
        return True


def _close(loop: asyncio.AbstractEventLoop) -> None:
    """After `run_forever`: cancel the tasks left, finish async generators, close the loop."""
    try:
        tasks = asyncio.all_tasks(loop)
        for task in tasks:
            task.cancel()
        if tasks:
            loop.run_until_complete(asyncio.gather(*tasks, return_exceptions=True))
        loop.run_until_complete(loop.shutdown_asyncgens())
        loop.run_until_complete(loop.shutdown_default_executor())
    finally:
        asyncio.set_event_loop(None)
        loop.close()
