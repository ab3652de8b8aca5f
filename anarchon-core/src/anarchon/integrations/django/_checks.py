"""System checks (``manage.py check``, and before ``manage.py anarchon run``): bad settings and
bad job declarations, each with an id and a hint, never with a credential.

| id | problem |
|---|---|
| anarchon.E001 | ``settings.ANARCHON`` is missing or not a dict |
| anarchon.E002 | it sets no store (nor does ``ANARCHON_STORE``) |
| anarchon.E003 | the store URL is invalid: unparsable, unknown scheme, bad options |
| anarchon.E004 | it has unknown keys |
| anarchon.E005 | a setting has a bad value |
| anarchon.E006 | a declared job is invalid: cron, zone, name, durations, or unfit for the store |
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from django.core import checks

from ..._errors import ConfigError
from ..._runtime.jobs import fit_to_store
from ..._urls import redact
from ._jobs import JOBS_MODULE, ProjectScheduler
from ._settings import read_project_settings

__all__ = ["check_project"]

_JOB_HINT = (
    "Fix the declaration (`anarchon next 'CRON' --tz ZONE` shows the slots of a schedule); "
    f"jobs are declared in {JOBS_MODULE}.py modules with @scheduler.job(...)"
)


def check_project(scheduler: ProjectScheduler) -> list[checks.CheckMessage]:
    """Every problem of ``settings.ANARCHON`` and of the jobs declared on `scheduler`."""
    project = read_project_settings()
    found: list[checks.CheckMessage] = [
        checks.Error(problem.message, hint=problem.hint, id=problem.id)
        for problem in project.problems
    ]
    for declared in scheduler.declared:
        error = declared.error
        if error is None and declared.spec is not None and project.store is not None:
            assert project.settings is not None
            try:
                fit_to_store(
                    declared.spec,
                    project.store.capabilities,
                    store_name=str(getattr(project.store, "url", type(project.store).__name__)),
                    clock_skew_ms=project.settings.clock_skew_ms,
                )
            except ConfigError as exc:
                error = str(exc)
        if error is not None:
            found.append(
                checks.Error(redact(error), hint=_JOB_HINT, obj=declared.where, id="anarchon.E006")
            )
    return found


def register(scheduler: ProjectScheduler) -> None:
    """Register the check for `scheduler` with Django (from the app's ``ready()``)."""

    def anarchon_settings(
        app_configs: Sequence[Any] | None = None, **kwargs: Any
    ) -> list[checks.CheckMessage]:
        return check_project(scheduler)

    checks.register(anarchon_settings)
