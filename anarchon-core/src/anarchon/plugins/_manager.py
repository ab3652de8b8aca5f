"""A typed facade over `pluggy.PluginManager`, built on first use, never at import time."""

from __future__ import annotations

import logging
import os
import threading
from importlib.metadata import entry_points
from typing import TYPE_CHECKING, Any

import pluggy

from .._errors import ConfigError
from ._markers import ENTRY_POINT_GROUP, PROJECT
from ._registry import BackendInfo, BackendRegistry

if TYPE_CHECKING:
    from .._claims import Claim, ClaimRequest
    from .._runs import RunStatus
    from ._started import StartedScheduler

__all__ = ["PluginManager", "plugin_manager", "reset_plugin_manager"]

log = logging.getLogger("anarchon.plugins")

DISABLED_ENV = "ANARCHON_DISABLED_PLUGINS"
"""Comma-separated entry-point names of plugins not to load (``redis,prometheus``)."""

PACKAGE_OF_SCHEME = {
    "sqlite": "anarchon-sqlite",
    "postgresql": "anarchon-postgres",
    "postgres": "anarchon-postgres",
    "redis": "anarchon-redis",
    "rediss": "anarchon-redis",
    "redis+cluster": "anarchon-redis",
    "rediss+cluster": "anarchon-redis",
    "redis+sentinel": "anarchon-redis",
    "amqp": "anarchon-rabbitmq",
    "amqps": "anarchon-rabbitmq",
    "nats": "anarchon-nats",
    "tls": "anarchon-nats",
}
"""The distribution of this project that serves each scheme, for the hint of a missing backend.
Only names we publish: a guessed ``anarchon-<scheme>`` is a name anyone could register."""


class PluginManager:
    """Backends and observers from the ``anarchon`` entry-point group and from code."""

    def __init__(self, *, load_entry_points: bool = True) -> None:
        # Here, not at the top: `spec` is a submodule of this package, whose __init__ imports
        # this module (an import circle at module level).
        from . import spec

        self._pm = pluggy.PluginManager(PROJECT)
        self._pm.add_hookspecs(spec)
        self._registry: BackendRegistry | None = None
        self.failed: dict[str, str] = {}
        """Plugins whose entry point could not be loaded, with the reason."""
        self.disabled = {
            n.strip() for n in os.environ.get(DISABLED_ENV, "").split(",") if n.strip()
        }
        from .._backends import memory_plugin

        self._pm.register(memory_plugin, name="memory")
        if load_entry_points:
            self._load_entry_points()

    def _load_entry_points(self) -> None:
        for ep in entry_points(group=ENTRY_POINT_GROUP):
            if ep.name in self.disabled or self._pm.has_plugin(ep.name):
                continue
            try:
                plugin = ep.load()
                self._pm.register(plugin, name=ep.name)
            except Exception as exc:  # noqa: BLE001 - a broken plugin must not stop the others
                self.failed[ep.name] = f"{type(exc).__name__}: {exc}"
                log.warning(
                    "anarchon plugin %r (%s) failed to load and is skipped: %s",
                    ep.name,
                    ep.value,
                    exc,
                    extra={"plugin": ep.name},
                )

    # -- plugins in code ------------------------------------------------------------------------
    def register(self, plugin: object, name: str | None = None) -> str:
        """Register an observer (or backend plugin) object; returns its name."""
        result = self._pm.register(plugin, name=name)
        self._registry = None
        if result is None:
            raise ConfigError(f"plugin {name!r} is blocked or already registered")
        return result

    def unregister(self, plugin: object) -> None:
        self._pm.unregister(plugin)
        self._registry = None

    def plugin_names(self) -> list[str]:
        return sorted(name for name, _ in self._pm.list_name_plugin())

    # -- backends -------------------------------------------------------------------------------
    def _backends(self) -> BackendRegistry:
        if self._registry is None:
            registry = BackendRegistry()
            for impl in self._pm.hook.anarchon_register_backends.get_hookimpls():
                registry.current_plugin = impl.plugin_name
                impl.function(registry=registry)
            self._registry = registry
        return self._registry

    def backends(self) -> list[BackendInfo]:
        """Every installed backend, by scheme."""
        return self._backends().all()

    def backend(self, scheme: str) -> BackendInfo:
        """The backend serving `scheme`, or a `ConfigError` listing the installed schemes."""
        info = self._backends().get(scheme)
        if info is None:
            installed = ", ".join(f"{b.scheme}://" for b in self.backends())
            hint = (
                f"; plugin {scheme!r} failed to load: {self.failed[scheme]}"
                if scheme in self.failed
                else ""
            )
            if scheme in self.disabled:
                hint = f"; it is disabled by {DISABLED_ENV}"
            package = PACKAGE_OF_SCHEME.get(scheme)
            install = (
                f"Install its package: `pip install {package}`"
                if package is not None
                else "No anarchon package serves it; a third-party backend adds its scheme "
                "through the `anarchon` entry points"
            )
            raise ConfigError(
                f"no backend for URL scheme {scheme!r}{hint}. Installed: {installed}. {install}"
            )
        return info

    # -- events ---------------------------------------------------------------------------------
    def _emit(self, hook_name: str, **kwargs: Any) -> None:
        hook = getattr(self._pm.hook, hook_name)
        for impl in hook.get_hookimpls():
            try:
                impl.function(**{k: kwargs[k] for k in impl.argnames})
            except Exception:
                log.exception(
                    "anarchon plugin %r raised in %s; ignored",
                    impl.plugin_name,
                    hook_name,
                    extra={"plugin": impl.plugin_name, "hook": hook_name},
                )

    def claim_decided(
        self, *, store: str, request: ClaimRequest, claim: Claim, latency_ms: float
    ) -> None:
        self._emit(
            "anarchon_claim_decided",
            store=store,
            request=request,
            claim=claim,
            latency_ms=latency_ms,
        )

    def run_started(self, *, job: str, slot: int, attempt: int, instance: str, token: str) -> None:
        self._emit(
            "anarchon_run_started",
            job=job,
            slot=slot,
            attempt=attempt,
            instance=instance,
            token=token,
        )

    def run_finished(
        self,
        *,
        job: str,
        slot: int,
        attempt: int,
        instance: str,
        status: RunStatus,
        error: str | None,
        duration_ms: float,
        recorded: bool,
    ) -> None:
        self._emit(
            "anarchon_run_finished",
            job=job,
            slot=slot,
            attempt=attempt,
            instance=instance,
            status=status,
            error=error,
            duration_ms=duration_ms,
            recorded=recorded,
        )

    def run_fenced(self, *, job: str, slot: int, attempt: int, instance: str, reason: str) -> None:
        self._emit(
            "anarchon_run_fenced",
            job=job,
            slot=slot,
            attempt=attempt,
            instance=instance,
            reason=reason,
        )

    def store_error(self, *, store: str, operation: str, error: BaseException) -> None:
        self._emit("anarchon_store_error", store=store, operation=operation, error=error)

    def fleet_slot(
        self, *, store: str, instance: str, job: str, slot: int, role: str, won: bool
    ) -> None:
        self._emit(
            "anarchon_fleet_slot",
            store=store,
            instance=instance,
            job=job,
            slot=slot,
            role=role,
            won=won,
        )

    def scheduler_started(self, *, scheduler: StartedScheduler) -> None:
        self._emit("anarchon_scheduler_started", scheduler=scheduler)


_lock = threading.Lock()
_manager: PluginManager | None = None


def plugin_manager() -> PluginManager:
    """The process-wide plugin manager, created on first use."""
    global _manager
    with _lock:
        if _manager is None:
            _manager = PluginManager()
        return _manager


def reset_plugin_manager() -> None:
    """Forget the process-wide manager (tests, or after installing a plugin at run time)."""
    global _manager
    with _lock:
        _manager = None
