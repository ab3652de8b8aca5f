"""anarchon in a FastAPI or Starlette app: the scheduler in the app's lifespan, readiness routes
from `Scheduler.health()`, and logs that show under uvicorn.

Needs only Starlette (``pip install "anarchon[fastapi]"``); a FastAPI app is a Starlette app::

    from fastapi import FastAPI
    from anarchon.integrations.fastapi import anarchon_lifespan, health_routes

    app = FastAPI(lifespan=anarchon_lifespan(scheduler), routes=health_routes(scheduler))

Each server worker (``uvicorn --workers N``, gunicorn's ``UvicornWorker``) runs its own lifespan,
so each starts its own scheduler after the fork, as a scheduler must; the store picks one winner
per slot across them.
"""

from __future__ import annotations

import logging
import sys
import threading
from collections.abc import AsyncIterator, Callable, Iterator
from contextlib import AbstractAsyncContextManager, asynccontextmanager, contextmanager, nullcontext
from typing import TYPE_CHECKING, Any, TypeVar, overload

from starlette.requests import Request
from starlette.responses import JSONResponse
from starlette.routing import BaseRoute, Route

from .._errors import ConfigError
from .._urls import redact

if TYPE_CHECKING:
    from .._runtime.scheduler import Scheduler

__all__ = ["ServerLogFormatter", "anarchon_lifespan", "health_routes"]

AppT = TypeVar("AppT")
StateT = TypeVar("StateT")
Lifespan = Callable[[AppT], AbstractAsyncContextManager[StateT]]


@overload
def anarchon_lifespan(
    scheduler: Scheduler, inner: None = None, *, show_logs: bool = True
) -> Lifespan[Any, None]: ...


@overload
def anarchon_lifespan(
    scheduler: Scheduler, inner: Lifespan[AppT, StateT], *, show_logs: bool = True
) -> Lifespan[AppT, StateT]: ...


def anarchon_lifespan(
    scheduler: Scheduler,
    inner: Lifespan[Any, Any] | None = None,
    *,
    show_logs: bool = True,
) -> Lifespan[Any, Any]:
    """A lifespan that runs `scheduler` while the app serves:
    ``FastAPI(lifespan=anarchon_lifespan(scheduler))``.

    At startup it starts the scheduler (``async with scheduler``: a store that does not answer
    yet gives a degraded start, not ready, unless ``fail_fast``); at shutdown (SIGTERM, Ctrl-C)
    it stops it with the handover: claiming stops, running jobs finish within the grace period,
    the leases of the others are released so another worker or instance takes them over at once.

    inner: the app's own lifespan, if it has one. It is entered first and left last, so the
    resources it opens (a database pool, a client) are there before the first job runs and
    stay until the last one ended; the state it yields is the app's state.

    show_logs: anarchon logs through the standard `logging` module, under the ``anarchon``
    logger, and uvicorn configures only its own loggers, so anarchon's INFO lines (started,
    stopped, takeovers) would not show. While the lifespan runs, if neither the ``anarchon``
    logger nor the root logger has a handler, one handler writing to stderr in uvicorn's style
    is attached to the ``anarchon`` logger, at uvicorn's level (INFO unless ``--log-level``
    says otherwise). An app that configures logging itself (any root handler, or a handler on
    ``anarchon``) keeps its configuration untouched. ``show_logs=False`` never attaches it.
    """

    @asynccontextmanager
    async def lifespan(app: Any) -> AsyncIterator[Any]:
        with _SERVER_LOGS.shown() if show_logs else nullcontext():
            if inner is None:
                async with scheduler:
                    yield None
            else:
                async with inner(app) as state, scheduler:
                    yield state

    return lifespan


def health_routes(
    scheduler: Scheduler, *, live: str = "/healthz", ready: str = "/readyz"
) -> list[BaseRoute]:
    """``GET /healthz`` (liveness: 200 while the app's event loop answers) and ``GET /readyz``
    (readiness: 200 once the scheduler started and its store answers, else 503), both with
    `Scheduler.health()` as JSON (texts redacted).

    ``FastAPI(routes=health_routes(scheduler))``, ``Starlette(routes=[*health_routes(s), ...])``,
    or later ``app.router.routes.extend(health_routes(scheduler))``. The paths are `live` and
    `ready`. Readiness is 503 before the lifespan started the scheduler, after it stopped, and
    while the store does not answer; a readiness probe on it takes such a worker out of the
    load balancer (if the app's HTTP traffic must not depend on the store, probe something else
    and watch this one)."""
    for what, path in (("live", live), ("ready", ready)):
        if not path.startswith("/"):
            raise ConfigError(f"health_routes: {what}={path!r} must be a path starting with '/'")
    if live == ready:
        raise ConfigError(f"health_routes: live and ready are both {live!r}; give them two paths")

    async def liveness(request: Request) -> JSONResponse:
        return JSONResponse(scheduler.health().to_dict())

    async def readiness(request: Request) -> JSONResponse:
        health = scheduler.health()
        return JSONResponse(health.to_dict(), status_code=200 if health.ready else 503)

    return [
        Route(live, liveness, methods=["GET"], name="anarchon-healthz"),
        Route(ready, readiness, methods=["GET"], name="anarchon-readyz"),
    ]


class ServerLogFormatter(logging.Formatter):
    """uvicorn's line style, ``INFO:     anarchon.scheduler: message``, with credentials in URLs
    redacted from the whole line."""

    def format(self, record: logging.LogRecord) -> str:
        level = f"{record.levelname}:".ljust(9)
        text = f"{level} {record.name}: {record.getMessage()}"
        if record.exc_info:
            text += "\n" + self.formatException(record.exc_info)
        return redact(text)


class _ServerLogs:
    """The handler of `show_logs`, shared by the lifespans running in this process."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._users = 0
        self._handler: logging.Handler | None = None
        self._level_set = False

    @contextmanager
    def shown(self) -> Iterator[None]:
        """Attach the handler for the duration, unless the app configured logging."""
        attached = self._attach()
        try:
            yield
        finally:
            if attached:
                self._detach()

    def _attach(self) -> bool:
        logger = logging.getLogger("anarchon")
        with self._lock:
            if self._handler is None:
                if logger.handlers or logging.getLogger().handlers:
                    return False  # the app configured logging: its configuration decides
                handler = logging.StreamHandler(sys.stderr)
                handler.setFormatter(ServerLogFormatter())
                logger.addHandler(handler)
                self._handler = handler
                self._level_set = logger.level == logging.NOTSET
                if self._level_set:
                    logger.setLevel(_server_level())
            self._users += 1
            return True

    def _detach(self) -> None:
        logger = logging.getLogger("anarchon")
        with self._lock:
            self._users -= 1
            if self._users == 0 and self._handler is not None:
                logger.removeHandler(self._handler)
                self._handler.close()
                self._handler = None
                if self._level_set:
                    logger.setLevel(logging.NOTSET)


_SERVER_LOGS = _ServerLogs()


def _server_level() -> int:
    """uvicorn's level (``--log-level``) when uvicorn configured its loggers, else INFO."""
    server = logging.getLogger("uvicorn.error")
    if server.handlers or logging.getLogger("uvicorn").handlers:
        return server.getEffectiveLevel()
    return logging.INFO
