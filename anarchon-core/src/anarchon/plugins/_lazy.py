"""Lazy public names for backend packages, so that registering a backend imports no driver."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from importlib import import_module
from typing import Any

__all__ = ["lazy_exports"]


def lazy_exports(package: str, exports: Mapping[str, str]) -> Callable[[str], Any]:
    """A module ``__getattr__`` (PEP 562) for the package named `package`: each name of
    `exports` comes from the module given for it (relative to the package, ``"._store"``), which
    is imported on the name's first use.

    The plugin manager imports every installed backend's plugin module, and with it the
    package's ``__init__``; re-exporting the store there by a plain import would import its
    driver in every process, used or not (hundreds of milliseconds for some). Write instead::

        if TYPE_CHECKING:
            from ._store import MyStore

        __all__ = ["MyStore"]
        __getattr__ = lazy_exports(__name__, {"MyStore": "._store"})
    """

    namespace = import_module(package).__dict__

    def __getattr__(name: str) -> Any:
        module = exports.get(name)
        if module is None:
            raise AttributeError(f"module {package!r} has no attribute {name!r}")
        value = getattr(import_module(module, package), name)
        namespace[name] = value  # found directly from now on
        return value

    return __getattr__
