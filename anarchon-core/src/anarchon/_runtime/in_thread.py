"""`SchedulerThread`: a scheduler started from sync code, on its own `LoopThread`.

`Scheduler.start()` called where no event loop runs (a gunicorn or uWSGI worker, Flask, Django, a
plain thread) starts one of these: the scheduler's start runs on the thread's loop and its errors
raise in the caller; `Scheduler.shutdown()` runs its stop there (the SIGTERM handover) and joins
the thread. If the application forgets, the interpreter's exit does it.

Pre-fork servers: a scheduler started in a parent process does not run in a child forked
afterwards (the thread is not copied, and its store connections belong to the parent). The
child logs an error at fork, and `start()`, `shutdown()` and `health()` raise `RuntimeError` in
it, naming where to start the scheduler instead: after the fork, in each worker."""

from __future__ import annotations

import concurrent.futures
import logging
import os
import threading
import weakref
from collections.abc import Callable, Coroutine, Generator
from typing import Any, TypeVar

from .background import LoopThread, at_exit

__all__ = ["STARTED", "SchedulerThread", "Started"]

log = logging.getLogger("anarchon.scheduler")

T = TypeVar("T")

EXIT_MARGIN_S = 15.0
"""At interpreter exit, how long past the grace period the stop may take (releases, close)."""

HEALTH_TIMEOUT_S = 5.0
"""How long `health()` from another thread waits for the scheduler's loop to answer."""

_started_here: weakref.WeakSet[SchedulerThread] = weakref.WeakSet()


class Started(Coroutine[Any, Any, None]):
    """What `Scheduler.start()` returns in sync code: the scheduler already runs in its thread;
    awaiting this (or handing it to ``asyncio.run``) does nothing more."""

    def __await__(self) -> Generator[Any, None, None]:
        return
        yield

    def send(self, value: Any) -> Any:
        raise StopIteration

    def throw(self, typ: Any, val: Any = None, tb: Any = None) -> Any:
        raise typ if val is None else val

    def close(self) -> None:
        return None


STARTED = Started()


class SchedulerThread:
    """One scheduler's loop thread: `start` and `shutdown` for sync code, guarded against forks
    and stopped at interpreter exit."""

    def __init__(
        self,
        instance: str,
        *,
        start: Callable[[], Coroutine[Any, Any, None]],
        stop: Callable[[], Coroutine[Any, Any, None]],
        exit_timeout_s: float,
    ) -> None:
        self.instance = instance
        self._start = start
        self._stop = stop
        self.exit_timeout_s = exit_timeout_s
        self.pid = os.getpid()
        self.loop_thread = LoopThread(f"anarchon-scheduler-{instance}")
        self._lock = threading.Lock()
        self._exit_registered = False

    def check_not_forked(self) -> None:
        """`RuntimeError` in a process forked while the scheduler ran; after a fork from a
        parent whose scheduler did not run, start afresh."""
        if self.pid == os.getpid():
            return
        if not self.loop_thread.started:
            self.pid = os.getpid()
            self.loop_thread = LoopThread(self.loop_thread.name)
            return
        raise RuntimeError(
            f"scheduler {self.instance} was started in process {self.pid}, and this process "
            f"({os.getpid()}) was forked from it afterwards: a started scheduler does not "
            "survive a fork. Start it after the fork, in each worker: gunicorn's "
            "post_worker_init (or post_fork) hook, uWSGI's @postfork, or at app import with "
            "gunicorn's --preload off"
        )

    @property
    def running(self) -> bool:
        return self.loop_thread.running

    def start(self) -> None:
        """Start the loop thread and the scheduler on it; errors of the start raise here (and
        leave no thread behind). Idempotent while running."""
        with self._lock:
            self.check_not_forked()
            if self.loop_thread.running:
                return
            self.loop_thread.start()
            try:
                self.loop_thread.run(self._start())
            except BaseException:
                self.loop_thread.stop()
                raise
            _started_here.add(self)
            if not self._exit_registered:
                self._exit_registered = True
                ref = weakref.ref(self)
                at_exit(lambda: _stop_at_exit(ref))

    def shutdown(self, *, wait: bool, timeout: float | None) -> None:
        """Stop the scheduler (the SIGTERM handover) and its thread. With `wait`, return once
        both ended, or raise `TimeoutError` after `timeout` seconds; else return at once."""
        self.check_not_forked()
        loop_thread = self.loop_thread
        if not loop_thread.running:
            return
        if loop_thread.in_thread():
            raise RuntimeError(
                f"scheduler {self.instance}: shutdown() was called on the scheduler's own loop; "
                "use `await scheduler.stop()` there"
            )
        future = loop_thread.submit(self._stop())
        if not wait:
            future.add_done_callback(lambda _: loop_thread.stop(0))
            return
        try:
            future.result(timeout)
        except (TimeoutError, concurrent.futures.TimeoutError):
            raise TimeoutError(
                f"scheduler {self.instance} did not stop within {timeout} s; it goes on "
                "stopping in its thread"
            ) from None
        finally:
            _started_here.discard(self)
        loop_thread.stop(timeout)

    def call(self, func: Callable[[], T]) -> T | None:
        """`func()` on the scheduler's loop, from another thread; None when that is not
        possible (not running, called on the loop itself, or the loop does not answer)."""
        self.check_not_forked()
        loop_thread = self.loop_thread
        if not loop_thread.running or loop_thread.in_thread():
            return None
        try:
            return loop_thread.call(func, HEALTH_TIMEOUT_S)
        except (RuntimeError, TimeoutError, concurrent.futures.TimeoutError):
            return None


def _stop_at_exit(ref: weakref.ref[SchedulerThread]) -> None:
    """At interpreter exit: stop a scheduler still running in this process, with the handover."""
    scheduler_thread = ref()
    if scheduler_thread is None or scheduler_thread.pid != os.getpid():
        return
    if not scheduler_thread.running:
        return
    log.info(
        "scheduler %s still running at interpreter exit: stopping it (call "
        "scheduler.shutdown() to stop it yourself)",
        scheduler_thread.instance,
        extra={"instance": scheduler_thread.instance},
    )
    try:
        scheduler_thread.shutdown(wait=True, timeout=scheduler_thread.exit_timeout_s)
    except Exception as exc:  # noqa: BLE001 - the interpreter is exiting; say why, go on
        log.error(
            "scheduler %s did not stop cleanly at exit: %s",
            scheduler_thread.instance,
            exc,
            extra={"instance": scheduler_thread.instance},
        )


def _forked_child() -> None:
    """In a fork child: say which started schedulers were left behind in the parent."""
    for scheduler_thread in list(_started_here):
        log.error(
            "scheduler %s was started in process %s before this process (%s) was forked; it "
            "does not run here. Start it after the fork (gunicorn post_worker_init, uWSGI "
            "@postfork, or at app import without --preload)",
            scheduler_thread.instance,
            scheduler_thread.pid,
            os.getpid(),
            extra={"instance": scheduler_thread.instance},
        )
    _started_here.clear()


if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=_forked_child)
