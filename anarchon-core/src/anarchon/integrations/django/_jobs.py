"""The project's scheduler: jobs declared in the apps' ``anarchon_jobs`` modules, one
`anarchon.Scheduler` built from ``settings.ANARCHON`` when first needed.

Declaring a job checks it at once but never raises: a bad cron expression in an app module is
reported by the system checks (``anarchon.E006``) with the others, not as a traceback while
Django starts. Building the scheduler raises the first problem as a `ConfigError`.
"""

from __future__ import annotations

import functools
import inspect
import threading
from collections.abc import Callable, Mapping
from typing import Any, TypeVar

import attrs

from ..._claims import Overlap
from ..._durations import DurationLike
from ..._errors import ConfigError
from ..._retries import Backoff
from ..._runtime.catch_up import CatchUp
from ..._runtime.jobs import JobSpec, make_job
from ..._runtime.scheduler import Scheduler
from ._settings import read_project_settings

__all__ = ["JOBS_MODULE", "DeclaredJob", "ProjectScheduler", "with_fresh_connections"]

JOBS_MODULE = "anarchon_jobs"
"""The module of each installed app that the integration imports at startup."""

F = TypeVar("F", bound=Callable[..., Any])

_DEFAULTS: Mapping[str, Any] = {
    "name": None,
    "tz": "UTC",
    "lease": None,
    "max_late": None,
    "overlap": None,
    "attempts": 3,
    "heartbeat": None,
    "catch_up": None,
    "timeout": None,
    "retries": 0,
    "backoff": None,
    "every": None,
    "offset": None,
}


@attrs.frozen(kw_only=True)
class DeclaredJob:
    """A job as declared with ``@scheduler.job(...)``, checked but not yet scheduled."""

    func: Callable[..., Any]
    cron: str | None
    """The cron expression; None for an interval job (``every=`` in `settings`)."""
    settings: Mapping[str, Any]
    """The keyword arguments of the declaration (`anarchon.Scheduler.job`'s)."""
    where: str
    """``module.function``: where the declaration is."""
    spec: JobSpec | None
    """The checked job; None when `error` says what is wrong."""
    error: str | None = None


def with_fresh_connections(func: Callable[..., Any]) -> Callable[..., Any]:
    """`func` wrapped so that Django's database connections are handled around each run as
    Django's request cycle handles them (``close_old_connections``).

    A sync job runs in a thread of its own (one per run): before the run, stale connections of
    the thread are closed; after it, every connection the run opened is closed, since nothing
    could reuse it once the thread ends. An async job reaches the ORM through asgiref's one
    thread-sensitive thread, which outlives the run: stale and expired connections of that
    thread are closed before and after (``CONN_MAX_AGE`` applies, as in a request).
    """
    from asgiref.sync import sync_to_async
    from django.db import close_old_connections, connections

    if inspect.iscoroutinefunction(func):

        @functools.wraps(func)
        async def run_async(*args: Any, **kwargs: Any) -> Any:
            await sync_to_async(close_old_connections)()
            try:
                return await func(*args, **kwargs)
            finally:
                await sync_to_async(close_old_connections)()

        return run_async

    @functools.wraps(func)
    def run_sync(*args: Any, **kwargs: Any) -> Any:
        close_old_connections()
        try:
            return func(*args, **kwargs)
        finally:
            connections.close_all()

    return run_sync


class ProjectScheduler:
    """The Django project's jobs and its one `anarchon.Scheduler`.

    Declare jobs in an ``anarchon_jobs.py`` module of any installed app (imported at startup)::

        from anarchon.integrations.django import scheduler

        @scheduler.job("*/5 * * * *")
        def send_digest() -> None: ...

    ``python manage.py anarchon run`` runs them; `get` gives the `anarchon.Scheduler` itself.
    """

    def __init__(self) -> None:
        self._declared: list[DeclaredJob] = []
        self._built: Scheduler | None = None
        self._lock = threading.Lock()

    @property
    def declared(self) -> tuple[DeclaredJob, ...]:
        """Every job declared so far, in order, with what is wrong with each."""
        return tuple(self._declared)

    def job(
        self,
        cron: str | None = None,
        *,
        every: DurationLike | None = None,
        offset: DurationLike | None = None,
        timeout: DurationLike | None = None,
        name: str | None = None,
        tz: str = "UTC",
        lease: DurationLike | None = None,
        max_late: DurationLike | None = None,
        overlap: str | Overlap | None = None,
        attempts: int = 3,
        heartbeat: DurationLike | None = None,
        catch_up: str | CatchUp | None = None,
        retries: int = 0,
        backoff: DurationLike | Mapping[str, Any] | Backoff | None = None,
    ) -> Callable[[F], F]:
        """Decorator: run the function at each slot of `cron` (or `every` interval) on exactly
        one process of the project. The settings are `anarchon.Scheduler.job`'s; the function is
        returned as is."""

        def declare(func: F) -> F:
            self.add_job(
                func,
                cron,
                every=every,
                offset=offset,
                timeout=timeout,
                name=name,
                tz=tz,
                lease=lease,
                max_late=max_late,
                overlap=overlap,
                attempts=attempts,
                heartbeat=heartbeat,
                catch_up=catch_up,
                retries=retries,
                backoff=backoff,
            )
            return func

        return declare

    def add_job(
        self, func: Callable[..., Any], cron: str | None = None, **settings: Any
    ) -> DeclaredJob:
        """Like `job`, without the decorator. A problem is kept for the system checks (and
        raised by `get`), not raised here; after `get` it is raised at once."""
        where = f"{getattr(func, '__module__', '?')}.{getattr(func, '__qualname__', func)!s}"
        try:
            spec: JobSpec | None = make_job(func, cron=cron, **{**_DEFAULTS, **settings})
            error = None
        except (ConfigError, TypeError) as exc:
            spec, error = None, str(exc)
        if spec is not None and any(
            d.spec is not None and d.spec.name == spec.name for d in self._declared
        ):
            error = f"job {spec.name!r} is declared twice; give one of them name=..."
        declared = DeclaredJob(
            func=func, cron=cron, settings=settings, where=where, spec=spec, error=error
        )
        with self._lock:
            if self._built is not None:
                raise ConfigError(
                    f"job declared at {where} after the project's scheduler was built; declare "
                    f"jobs in an {JOBS_MODULE}.py module of an installed app, imported at startup"
                )
            self._declared.append(declared)
        return declared

    def get(self) -> Scheduler:
        """The project's `anarchon.Scheduler`, built on first call from ``settings.ANARCHON``
        with every declared job (each wrapped by `with_fresh_connections`). Raises
        `ConfigError` with the first problem the system checks report."""
        with self._lock:
            if self._built is None:
                self._built = self._build()
            return self._built

    def _build(self) -> Scheduler:
        project = read_project_settings()
        if project.problems:
            first = project.problems[0]
            raise ConfigError(f"{first.message} ({first.id}: {first.hint})")
        for declared in self._declared:
            if declared.error is not None:
                raise ConfigError(f"{declared.where}: {declared.error}")
        scheduler = Scheduler(**project.scheduler_kwargs)
        for declared in self._declared:
            scheduler.add_job(
                with_fresh_connections(declared.func), declared.cron, **declared.settings
            )
        return scheduler
