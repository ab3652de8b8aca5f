"""`SHARED_STORES`: for sync `once`, one event loop thread and one open store per URL, per process.

A sync application (APScheduler 3, Celery, cron jobs in a Flask app) may guard every fire with
``with anarchon.once(url, ...)``; opening a connection per fire would cost a round trip or more
each time, and a connection storm at each slot. So sync `once` opens the store of each URL once,
lazily, on a background loop thread (`LoopThread`), and keeps it open: heartbeats run there
while the body runs in the caller's thread. A fork child (gunicorn, uWSGI, Celery prefork)
inherits the parent's objects but neither its thread nor the right to use its connections: it
opens its own (the parent's are left alone, not closed, as closing them could end the parent's
sessions). At interpreter exit the stores are closed and the thread stopped."""

from __future__ import annotations

import asyncio
import logging
import os
import threading

from .._connect import create_store
from .._urls import redact
from ..abc import ClaimStore
from .background import LoopThread, at_exit

__all__ = ["SHARED_STORES", "SharedStores"]

log = logging.getLogger("anarchon.once")

CLOSE_TIMEOUT_S = 5.0
"""At exit, how long closing each store may take."""


class SharedStores:
    """The loop thread and the open stores of sync `once`, in this process."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._pid = os.getpid()
        self._loop_thread = LoopThread("anarchon-once")
        self._stores: dict[str, ClaimStore] = {}
        self._exit_registered = False

    def _this_process(self) -> None:
        """After a fork: forget the parent's thread and stores (lock held)."""
        if self._pid == os.getpid():
            return
        self._pid = os.getpid()
        self._loop_thread = LoopThread("anarchon-once")
        self._stores = {}

    def loop_thread(self) -> LoopThread:
        """The running loop thread of this process, started on first use."""
        with self._lock:
            return self._running_loop_thread()

    def _running_loop_thread(self) -> LoopThread:
        self._this_process()
        if not self._loop_thread.running:
            self._loop_thread.start()
            if not self._exit_registered:
                self._exit_registered = True  # inherited by fork children, which close theirs
                at_exit(self.close)
        return self._loop_thread

    def store(self, url: str) -> tuple[LoopThread, ClaimStore]:
        """The open store for `url` and the loop thread it lives on; opened on first use (its
        errors, `ConfigError` or `StoreUnavailable`, raise here and nothing is kept)."""
        with self._lock:
            loop_thread = self._running_loop_thread()
            store = self._stores.get(url)
            if store is None:
                store = create_store(url)
                loop_thread.run(store.open())
                self._stores[url] = store
                log.debug("once: opened %s for this process", redact(url))
            return loop_thread, store

    def opened(self) -> list[str]:
        """The URLs whose store is open in this process (redacted)."""
        with self._lock:
            self._this_process()
            return [redact(url) for url in self._stores]

    def close(self) -> None:
        """Close this process's stores and stop the thread (at exit; usable again after)."""
        with self._lock:
            if self._pid != os.getpid():
                return
            stores, self._stores = self._stores, {}
            loop_thread = self._loop_thread
            if not loop_thread.running:
                return
            for url, store in stores.items():
                try:
                    loop_thread.run(asyncio.wait_for(store.close(), CLOSE_TIMEOUT_S))
                except Exception as exc:  # noqa: BLE001 - closing the others matters more
                    log.warning("once: closing %s failed: %s", redact(url), redact(str(exc)))
            loop_thread.stop(CLOSE_TIMEOUT_S)


SHARED_STORES = SharedStores()
