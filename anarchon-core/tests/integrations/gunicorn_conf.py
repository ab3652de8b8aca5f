"""gunicorn hooks for test_gunicorn.py, as the sync-apps docs recommend: start the scheduler in
each worker once the app is loaded, stop it with the handover when the worker exits."""

from __future__ import annotations

from typing import Any


def post_worker_init(worker: Any) -> None:
    from gunicorn_app import journal, scheduler

    scheduler.start()
    journal("ready")


def worker_exit(server: Any, worker: Any) -> None:
    from gunicorn_app import journal, scheduler

    scheduler.shutdown()
    journal("stopped")
