"""anarchon-mariadb: a worked example of a third-party anarchon backend, ``mariadb://``.

Written only against anarchon's public API (`anarchon.backend`: the contract, the values and
the lease rules `decide_claim` and `decide_finish`; `anarchon.hookimpl`), and certified by
`anarchon-conformance`.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from anarchon.plugins import lazy_exports

if TYPE_CHECKING:
    from ._store import MariaDBOptions, MariaDBStore

__all__ = ["MariaDBOptions", "MariaDBStore"]

# The driver is imported when a name is first used, not when the plugin registers the backend.
__getattr__ = lazy_exports(
    __name__,
    {
        "MariaDBOptions": "._store",
        "MariaDBStore": "._store",
    },
)
