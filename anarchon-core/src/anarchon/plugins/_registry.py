"""The backend registry handed to `anarchon_register_backends`."""

from __future__ import annotations

import importlib
import re
from typing import TYPE_CHECKING

import attrs

from .._errors import ConfigError

if TYPE_CHECKING:
    from ..abc import ClaimStore

_SCHEME = re.compile(r"[a-z][a-z0-9+.-]*")
_TARGET = re.compile(r"[A-Za-z_][\w.]*:[A-Za-z_]\w*")


@attrs.frozen(kw_only=True)
class BackendInfo:
    """A registered backend: its URL scheme, where its class lives, and what it is."""

    scheme: str
    target: str
    """``"package.module:ClassName"``, imported only when a URL with this scheme is used."""
    description: str
    plugin: str
    """Name of the plugin that registered it."""

    def load(self) -> type[ClaimStore]:
        from ..abc import ClaimStore

        module_name, _, class_name = self.target.partition(":")
        try:
            module = importlib.import_module(module_name)
        except ImportError as exc:
            raise ConfigError(
                f"backend {self.scheme!r} ({self.target}) cannot be imported: {exc}; reinstall the "
                f"package of plugin {self.plugin!r}"
            ) from exc
        cls = getattr(module, class_name, None)
        if not (isinstance(cls, type) and issubclass(cls, ClaimStore)):
            raise ConfigError(
                f"backend {self.scheme!r}: {self.target} is not a ClaimStore subclass"
            )
        return cls


class BackendRegistry:
    """Collects backends from every plugin; one scheme, one backend."""

    def __init__(self) -> None:
        self._backends: dict[str, BackendInfo] = {}
        self.current_plugin = "?"

    def add(self, scheme: str, target: str, description: str = "") -> None:
        """Register `target` (``"module:Class"``) for URLs starting with ``scheme://``."""
        if not _SCHEME.fullmatch(scheme):
            raise ConfigError(f"plugin {self.current_plugin!r}: invalid URL scheme {scheme!r}")
        if not _TARGET.fullmatch(target):
            raise ConfigError(
                f"plugin {self.current_plugin!r}: backend target {target!r} must look like "
                "'package.module:ClassName'"
            )
        existing = self._backends.get(scheme)
        if existing is not None and existing.target != target:
            raise ConfigError(
                f"URL scheme {scheme!r} is claimed by two plugins: {existing.plugin!r} "
                f"({existing.target}) and {self.current_plugin!r} ({target}); uninstall one or "
                "disable it with ANARCHON_DISABLED_PLUGINS"
            )
        self._backends[scheme] = BackendInfo(
            scheme=scheme, target=target, description=description, plugin=self.current_plugin
        )

    def get(self, scheme: str) -> BackendInfo | None:
        return self._backends.get(scheme)

    def all(self) -> list[BackendInfo]:
        return sorted(self._backends.values(), key=lambda b: b.scheme)
