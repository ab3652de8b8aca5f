"""`anarchon.integrations.fastapi` under real uvicorn workers (fastapi_app.py), and its pieces
in process: the lifespan around the app's own, the readiness routes, the log handler."""

from __future__ import annotations

import asyncio
import json
import logging
import math
import os
import shutil
import signal
import socket
import sqlite3
import subprocess
import sys
import time
import urllib.error
import urllib.request
from collections import Counter
from collections.abc import AsyncIterator, Callable, Iterator
from contextlib import asynccontextmanager, contextmanager
from pathlib import Path
from typing import Any

import pytest
from typing_extensions import Self

import anarchon
from anarchon import RunRecord, RunStatus

pytest.importorskip("fastapi")
pytest.importorskip("uvicorn")

from starlette.applications import Starlette
from starlette.types import Message

from anarchon.integrations.fastapi import (
    ServerLogFormatter,
    anarchon_lifespan,
    health_routes,
)

HERE = Path(__file__).parent
SETTLE_S = 0.5
"""Slots due this close to the stop may be cut short by it."""


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def wait_for(condition: Callable[[], object], timeout: float, what: str, logs: Path) -> None:
    deadline = time.monotonic() + timeout
    while not condition():
        if time.monotonic() > deadline:
            pytest.fail(
                f"timed out after {timeout} s waiting for {what}\n{logs.read_text()[-6000:]}"
            )
        time.sleep(0.02)


def get(port: int, path: str) -> tuple[int, dict[str, Any]] | None:
    """``GET path``: the status and JSON body, or None while nothing answers."""
    try:
        with urllib.request.urlopen(f"http://127.0.0.1:{port}{path}", timeout=2) as reply:
            return reply.status, json.loads(reply.read())
    except urllib.error.HTTPError as error:
        with error:
            return error.code, json.loads(error.read())
    except OSError:
        return None


def journal(path: Path, what: str) -> list[tuple[int, Any, Any, float]]:
    """(pid, slot, attempt, at) of each entry `what`, in order."""
    db = sqlite3.connect(path, timeout=30)
    try:
        query = "SELECT pid, slot, attempt, at FROM journal WHERE what = ? ORDER BY at"
        return list(db.execute(query, (what,)))
    except sqlite3.OperationalError:  # not created yet
        return []
    finally:
        db.close()


def history(url: str, job: str) -> list[RunRecord]:
    async def read() -> list[RunRecord]:
        async with anarchon.connect(url) as store:
            return await store.history(job, 1000)

    return asyncio.run(read())


class Uvicorn:
    """``uvicorn fastapi_app:app --workers N`` on a free port, its output in a file; stopped
    (SIGTERM, then killed) at the end whatever happened."""

    def __init__(self, tmp_path: Path, store: str, *, workers: int) -> None:
        self.port = free_port()
        self.logs = tmp_path / "uvicorn.log"
        self.journal = tmp_path / "journal.db"
        self.hold = tmp_path / "hold"
        self.env = {
            **os.environ,
            "ANARCHON_TEST_APP_STORE": store,
            "ANARCHON_TEST_APP_JOURNAL": str(self.journal),
            "ANARCHON_TEST_APP_HOLD": str(self.hold),
        }
        self.command = [sys.executable, "-m", "uvicorn", "fastapi_app:app", "--app-dir", str(HERE)]
        self.command += ["--workers", str(workers), "--host", "127.0.0.1", "--port", str(self.port)]
        self.server: subprocess.Popen[bytes] | None = None

    def __enter__(self) -> Self:
        with self.logs.open("w") as out:
            self.server = subprocess.Popen(
                self.command, env=self.env, stdout=out, stderr=subprocess.STDOUT
            )
        return self

    def stop(self) -> int:
        assert self.server is not None
        if self.server.poll() is None:
            self.server.send_signal(signal.SIGTERM)
        try:
            return self.server.wait(30)
        except subprocess.TimeoutExpired:
            self.server.kill()
            self.server.wait()
            pytest.fail(f"uvicorn did not stop within 30 s\n{self.output()[-6000:]}")

    def __exit__(self, *exc: object) -> None:
        self.stop()

    def output(self) -> str:
        return self.logs.read_text()

    def ready_pids(self, seen: set[int]) -> set[int]:
        """Ask `/readyz` once; add the worker's pid to `seen` if it said ready (200)."""
        assert self.server is not None
        assert self.server.poll() is None, f"uvicorn exited\n{self.output()[-6000:]}"
        answer = get(self.port, "/readyz")
        if answer is not None:
            status, body = answer
            assert (status == 200) is body["ready"], answer
            if body["ready"]:
                seen.add(int(body["instance"].removeprefix("pid-")))
        return seen


@pytest.mark.processes
def test_two_uvicorn_workers_run_each_slot_once_log_their_start_and_hand_over_on_sigterm(
    tmp_path: Path,
) -> None:
    store = f"sqlite:///{tmp_path / 'anarchon.db'}"
    with Uvicorn(tmp_path, store, workers=2) as app:
        ready: set[int] = set()
        wait_for(lambda: len(app.ready_pids(ready)) == 2, 60, "two workers ready", app.logs)
        first, second = sorted(ready)

        # A long run holds its first attempt; SIGTERM to its worker hands it over: the other
        # worker takes it over long before its 30 s lease would have expired.
        # Held from now on: both workers claim its slot, one wins, the other becomes a backup.
        app.hold.touch()
        wait_for(lambda: journal(app.journal, "held"), 10, "a held long run", app.logs)
        holder, slot, attempt, _ = journal(app.journal, "held")[0]
        assert attempt == 1 and holder in ready
        os.kill(holder, signal.SIGTERM)
        signalled = time.time()

        def taken_over() -> list[tuple[int, Any, Any, float]]:
            return [r for r in journal(app.journal, "long") if r[1] == slot and r[2] == 2]

        wait_for(taken_over, 10, f"the takeover of long slot {slot}", app.logs)
        taker, _, _, took_over_at = taken_over()[0]
        assert taker == (second if holder == first else first)
        assert took_over_at - signalled < 10, "the lease was not released at the stop"
        app.hold.unlink()
        # The worker's own lifespan was left after the scheduler stopped.
        wait_for(
            lambda: holder in [pid for pid, *_ in journal(app.journal, "closed")],
            10,
            "the stopped worker's own lifespan closed",
            app.logs,
        )

        # uvicorn starts a new worker in its place, which becomes ready too.
        wait_for(lambda: len(app.ready_pids(ready)) == 3, 30, "the new worker ready", app.logs)
        last = math.ceil(time.time()) + 2
        wait_for(
            lambda: any(r[1] >= last * 1000 for r in journal(app.journal, "tick")),
            10,
            "ticks after the new worker started",
            app.logs,
        )
        stopped = time.time()
        assert app.stop() == 0, app.output()[-6000:]

    output = app.output()
    # Every worker's start and stop lines, in uvicorn's style, without any logging setup.
    for pid in ready:
        assert f"INFO:     anarchon.scheduler: scheduler pid-{pid} started with 2 job(s)" in output
        assert f"INFO:     anarchon.scheduler: scheduler pid-{pid} stopped" in output
    opened = [pid for pid, *_ in journal(app.journal, "opened")]
    closed = [pid for pid, *_ in journal(app.journal, "closed")]
    assert sorted(opened) == sorted(closed) == sorted(ready)

    # Each tick slot once, across all workers: by the journal and by the store's ledger.
    ticks = journal(app.journal, "tick")
    runs = Counter(slot for _, slot, _, _ in ticks)
    twice = sorted(s for s, n in runs.items() if n > 1)
    assert not twice, f"tick slots run more than once across the workers: {twice}"
    ledger = {r.slot: r for r in history(store, "tick")}
    first_slot = min(runs)
    due = range(first_slot, math.floor(stopped - SETTLE_S) * 1000 + 1, 1000)
    missing = [s for s in due if runs[s] != 1 or ledger[s].status is not RunStatus.SUCCEEDED]
    assert not missing, f"tick slots not run once: {missing}\n{output[-6000:]}"
    assert len(due) >= 5
    assert {r[0] for r in ticks} <= ready

    # The held run: taken over by the other worker, attempt 2, succeeded.
    record = next(r for r in history(store, "long") if r.slot == slot)
    assert (record.status, record.attempt, record.holder) == (
        RunStatus.SUCCEEDED,
        2,
        f"pid-{taker}",
    )


# -- in process: the pieces, on a real Starlette app and the memory store -----------------------


def memory_scheduler() -> anarchon.Scheduler:
    scheduler = anarchon.Scheduler("memory://", instance="app", environ={})

    @scheduler.job("0 0 1 1 *", name="yearly")
    def yearly() -> None: ...

    return scheduler


async def asgi_get(app: Starlette, path: str) -> tuple[int, dict[str, Any]]:
    """One ``GET`` through the app's ASGI interface: the status and JSON body."""
    scope = {
        "type": "http",
        "asgi": {"version": "3.0"},
        "http_version": "1.1",
        "method": "GET",
        "scheme": "http",
        "path": path,
        "raw_path": path.encode(),
        "query_string": b"",
        "root_path": "",
        "headers": [],
        "client": ("127.0.0.1", 1),
        "server": ("127.0.0.1", 80),
    }
    sent: list[Message] = []

    async def receive() -> Message:
        return {"type": "http.request", "body": b"", "more_body": False}

    async def send(message: Message) -> None:
        sent.append(message)

    await app(scope, receive, send)
    body = b"".join(m.get("body", b"") for m in sent if m["type"] == "http.response.body")
    return sent[0]["status"], json.loads(body)


async def test_readyz_is_503_until_the_lifespan_started_the_scheduler_and_after_it_stopped() -> (
    None
):
    scheduler = memory_scheduler()
    app = Starlette(routes=health_routes(scheduler), lifespan=anarchon_lifespan(scheduler))
    status, body = await asgi_get(app, "/readyz")
    assert (status, body["ready"], body["started"]) == (503, False, False)
    assert (await asgi_get(app, "/healthz"))[0] == 200  # live: the loop answers
    async with app.router.lifespan_context(app):
        status, body = await asgi_get(app, "/readyz")
        assert (status, body["ready"], body["instance"]) == (200, True, "app")
        assert body["last_claims"] == {} and body["store"] == "memory://"
    status, body = await asgi_get(app, "/readyz")
    assert (status, body["started"]) == (503, False)


async def test_health_routes_take_other_paths_and_refuse_bad_ones() -> None:
    scheduler = memory_scheduler()
    app = Starlette(routes=health_routes(scheduler, live="/live", ready="/ops/ready"))
    assert (await asgi_get(app, "/ops/ready"))[0] == 503
    assert (await asgi_get(app, "/live"))[0] == 200
    with pytest.raises(anarchon.ConfigError, match="must be a path starting with '/'"):
        health_routes(scheduler, ready="readyz")
    with pytest.raises(anarchon.ConfigError, match="give them two paths"):
        health_routes(scheduler, live="/z", ready="/z")


async def test_the_apps_own_lifespan_is_entered_first_and_left_last_with_its_state() -> None:
    scheduler = memory_scheduler()
    seen: list[tuple[str, bool]] = []

    @asynccontextmanager
    async def own(app: Starlette) -> AsyncIterator[dict[str, Any]]:
        seen.append(("opened", scheduler.health().started))
        yield {"pool": "the app's pool"}
        seen.append(("closed", scheduler.health().started))

    app = Starlette(lifespan=anarchon_lifespan(scheduler, own))
    async with app.router.lifespan_context(app) as state:
        assert state == {"pool": "the app's pool"}
        assert scheduler.health().ready
    assert seen == [("opened", False), ("closed", False)]


@contextmanager
def no_logging_config() -> Iterator[logging.Logger]:
    """The `anarchon` logger as an app that configured no logging has it: pytest's capture
    handlers are taken off the root logger meanwhile (and put back)."""
    root = logging.getLogger()
    saved = root.handlers[:]
    for handler in saved:
        root.removeHandler(handler)
    logger = logging.getLogger("anarchon")
    assert not logger.handlers and logger.level == logging.NOTSET
    try:
        yield logger
        assert not logger.handlers and logger.level == logging.NOTSET, "a handler was left"
    finally:
        for handler in root.handlers[:]:
            root.removeHandler(handler)
        for handler in saved:
            root.addHandler(handler)


async def test_logs_show_in_uvicorns_style_while_the_app_configures_no_logging(
    capsys: pytest.CaptureFixture[str],
) -> None:
    scheduler = memory_scheduler()
    app = Starlette(lifespan=anarchon_lifespan(scheduler))
    with no_logging_config() as logger:
        async with app.router.lifespan_context(app):
            assert len(logger.handlers) == 1
            assert logger.level == logging.INFO
            nested = Starlette(lifespan=anarchon_lifespan(memory_scheduler()))
            async with nested.router.lifespan_context(nested):  # one handler for both apps
                assert len(logger.handlers) == 1
            assert len(logger.handlers) == 1
    lines = capsys.readouterr().err.splitlines()
    assert "INFO:     anarchon.scheduler: scheduler app started with 1 job(s) on memory://" in (
        " ".join(line.split(" (")[0] for line in lines)
    ), lines
    assert "INFO:     anarchon.scheduler: scheduler app stopped" in lines


async def test_logs_are_left_to_the_app_when_it_configured_them_or_opted_out(
    capsys: pytest.CaptureFixture[str],
) -> None:
    with no_logging_config() as logger:
        app = Starlette(lifespan=anarchon_lifespan(memory_scheduler(), show_logs=False))
        async with app.router.lifespan_context(app):
            assert logger.handlers == []
        logging.getLogger().addHandler(logging.NullHandler())  # the app's own configuration
        app = Starlette(lifespan=anarchon_lifespan(memory_scheduler()))
        async with app.router.lifespan_context(app):
            assert logger.handlers == []
            assert logger.level == logging.NOTSET
    assert "anarchon" not in capsys.readouterr().err


def test_the_log_line_redacts_credentials() -> None:
    record = logging.LogRecord(
        "anarchon.scheduler",
        logging.WARNING,
        __file__,
        1,
        "store %s down",
        ("redis://u:s3cret@h/0",),
        None,
    )
    line = ServerLogFormatter().format(record)
    assert line.startswith("WARNING:  anarchon.scheduler: store redis://u:")
    assert "s3cret" not in line


# -- under uvicorn: readiness follows the store --------------------------------------------------


class RedisServer:
    """A private redis-server on a free port, with a password; started and stopped at will."""

    PASSWORD = "s3cret-pw"

    def __init__(self, tmp_path: Path) -> None:
        binary = shutil.which("redis-server")
        if binary is None:
            pytest.skip("no redis-server on PATH: install redis (scripts/services)")
        self.binary = binary
        self.dir = tmp_path
        self.port = free_port()
        self.url = f"redis://:{self.PASSWORD}@127.0.0.1:{self.port}/0?prefix=app"
        self.server: subprocess.Popen[bytes] | None = None

    def start(self) -> None:
        args = ["--port", str(self.port), "--bind", "127.0.0.1", "--save", "", "--appendonly"]
        args += ["no", "--dir", str(self.dir), "--requirepass", self.PASSWORD]
        self.server = subprocess.Popen([self.binary, *args], stdout=subprocess.DEVNULL)
        deadline = time.monotonic() + 10
        while time.monotonic() < deadline:
            try:
                with socket.create_connection(("127.0.0.1", self.port), 0.5) as sock:
                    sock.sendall(b"PING\r\n")
                    if sock.recv(64):  # any answer (NOAUTH included): it is up
                        return
            except OSError:
                time.sleep(0.02)
        pytest.fail(f"redis-server did not answer on port {self.port} within 10 s")

    def stop(self) -> None:
        if self.server is not None:
            self.server.terminate()
            self.server.wait(10)
            self.server = None


@pytest.mark.processes
@pytest.mark.services  # a private redis-server
def test_readyz_under_uvicorn_is_503_while_the_store_is_down_and_200_once_it_is_back(
    tmp_path: Path,
) -> None:
    pytest.importorskip("anarchon_redis")
    redis = RedisServer(tmp_path)
    redis.start()
    try:
        with Uvicorn(tmp_path, redis.url, workers=1) as app:

            def readiness(ready: bool) -> dict[str, Any] | None:
                assert app.server is not None and app.server.poll() is None, app.output()
                answer = get(app.port, "/readyz")
                if answer is None or answer[1]["ready"] is not ready:
                    return None
                assert answer[0] == (200 if ready else 503), answer
                return answer[1]

            wait_for(lambda: readiness(True), 60, "ready", app.logs)
            redis.stop()
            wait_for(lambda: readiness(False), 15, "not ready with the store down", app.logs)
            down = readiness(False)
            assert down is not None and down["store_reachable"] is False
            assert down["store_down_since"] is not None and down["last_error"]
            live = get(app.port, "/healthz")
            assert live is not None and live[0] == 200  # alive all the same
            redis.start()
            wait_for(lambda: readiness(True), 30, "ready again once the store is back", app.logs)
            # A single uvicorn process re-raises SIGTERM once it shut down gracefully.
            assert app.stop() in (0, -signal.SIGTERM), app.output()[-6000:]
            assert "Application shutdown complete." in app.output()
        assert RedisServer.PASSWORD not in json.dumps(down)
        assert RedisServer.PASSWORD not in app.output()
        assert "anarchon.scheduler: scheduler pid-" in app.output()
    finally:
        redis.stop()


@pytest.mark.processes
def test_import_anarchon_imports_no_web_framework() -> None:
    code = "import sys, anarchon; anarchon.Scheduler; anarchon.once; print(sorted(sys.modules))"
    loaded = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, check=True
    ).stdout
    assert "'starlette" not in loaded and "'fastapi" not in loaded and "'uvicorn" not in loaded
    assert "'anarchon.integrations" not in loaded
