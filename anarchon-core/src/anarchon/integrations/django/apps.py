"""The Django app: ``INSTALLED_APPS = [..., "anarchon.integrations.django"]``."""

from __future__ import annotations

from django.apps import AppConfig

__all__ = ["AnarchonConfig"]


class AnarchonConfig(AppConfig):
    """Imports every installed app's ``anarchon_jobs`` module and registers the system checks."""

    name = "anarchon.integrations.django"
    label = "anarchon"
    verbose_name = "anarchon"

    def ready(self) -> None:
        from django.utils.module_loading import autodiscover_modules

        from . import _checks
        from ._jobs import JOBS_MODULE
        from ._project import scheduler

        _checks.register(scheduler)
        autodiscover_modules(JOBS_MODULE)
