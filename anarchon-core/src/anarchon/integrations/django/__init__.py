"""anarchon in a Django project (``pip install "anarchon[django]"``).

Add the app and the settings::

    INSTALLED_APPS = [..., "anarchon.integrations.django"]
    ANARCHON = {"store": "postgresql://app@db.internal:5432/app"}

declare jobs in an ``anarchon_jobs.py`` module of any installed app::

    from anarchon.integrations.django import scheduler

    @scheduler.job("*/5 * * * *")
    def send_digest() -> None: ...

and run ``python manage.py anarchon run`` on as many hosts as you like: each slot runs once.
``manage.py anarchon status`` and ``manage.py anarchon history JOB`` show what the store holds;
``manage.py check`` reports bad settings (``anarchon.E001`` ...). Importing this package needs
no configured settings: they are read when the scheduler is first built.
"""

from __future__ import annotations

from ._jobs import JOBS_MODULE, DeclaredJob, ProjectScheduler, with_fresh_connections
from ._project import scheduler
from ._settings import KEYS, SETTING

__all__ = [
    "JOBS_MODULE",
    "KEYS",
    "SETTING",
    "DeclaredJob",
    "ProjectScheduler",
    "scheduler",
    "with_fresh_connections",
]
