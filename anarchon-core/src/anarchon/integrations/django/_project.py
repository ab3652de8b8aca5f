"""The one `ProjectScheduler` of the process (`anarchon.integrations.django.scheduler`)."""

from __future__ import annotations

from ._jobs import ProjectScheduler

__all__ = ["scheduler"]

scheduler = ProjectScheduler()
"""The project's jobs, declared with ``@scheduler.job(...)`` in the apps' ``anarchon_jobs``
modules; ``scheduler.get()`` is the `anarchon.Scheduler` that runs them."""
