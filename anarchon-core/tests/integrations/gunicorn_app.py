"""A plain WSGI app whose scheduler each gunicorn worker starts (see gunicorn_conf.py), for
test_gunicorn.py. The store URL and the journal file come from the environment.

Jobs write what they do to the journal (one line per event, appended by every worker):
``PID tick SLOT``; ``PID long-started SLOT`` and ``PID long-fenced SLOT REASON`` for a job that
runs until the shutdown fences it."""

from __future__ import annotations

import json
import os
import time
from collections.abc import Callable, Iterable
from typing import Any

import anarchon

STORE = os.environ["ANARCHON_TEST_STORE"]
JOURNAL = os.environ["ANARCHON_TEST_JOURNAL"]

scheduler = anarchon.Scheduler(STORE, grace="1s")


def journal(text: str) -> None:
    with open(JOURNAL, "a") as f:
        f.write(f"{os.getpid()} {text}\n")


@scheduler.job("* * * * * *")
def tick(run: anarchon.Run) -> None:
    journal(f"tick {run.slot}")


@scheduler.job("* * * * * *", overlap="skip")
def long(run: anarchon.Run) -> None:
    journal(f"long-started {run.slot}")
    while not run.fenced:  # runs until the shutdown releases it
        time.sleep(0.02)
    journal(f"long-fenced {run.slot} {run.fence_reason}")


def app(environ: dict[str, Any], start_response: Callable[..., Any]) -> Iterable[bytes]:
    """Any request: this worker's scheduler health (read from the request's thread)."""
    health = scheduler.health()
    body = json.dumps({"pid": os.getpid(), "ready": health.ready}).encode()
    start_response("200 OK", [("Content-Type", "application/json")])
    return [body]
