"""Plugins: backends and event observers, found through the ``anarchon`` entry-point group.

A plugin is a module or object with functions marked `hookimpl`, named after the hook specs in
`anarchon.plugins.spec`. Its entry-point name is the URL scheme it serves (observers pick any name).
"""

from __future__ import annotations

from ._lazy import lazy_exports
from ._manager import PluginManager, plugin_manager, reset_plugin_manager
from ._markers import hookimpl
from ._registry import BackendInfo, BackendRegistry
from ._started import StartedScheduler

__all__ = [
    "BackendInfo",
    "BackendRegistry",
    "PluginManager",
    "StartedScheduler",
    "hookimpl",
    "lazy_exports",
    "plugin_manager",
    "reset_plugin_manager",
]
