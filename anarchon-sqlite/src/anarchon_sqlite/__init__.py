"""anarchon-sqlite: the embedded SQLite backend, ``sqlite:///path``.

Each claim is one ``BEGIN IMMEDIATE`` transaction on a local SQLite file; runs hold leases and are
fenced by token (DESIGN section 5). `anarchon_sqlite.testing` holds the conformance backdoors.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from anarchon.plugins import lazy_exports

if TYPE_CHECKING:
    from ._options import SQLiteOptions
    from ._schema import SCHEMA_VERSION
    from ._store import SQLiteStore

__all__ = ["SCHEMA_VERSION", "SQLiteOptions", "SQLiteStore"]

# The driver is imported when a name is first used, not when the plugin registers the backend.
__getattr__ = lazy_exports(
    __name__,
    {
        "SQLiteOptions": "._options",
        "SCHEMA_VERSION": "._schema",
        "SQLiteStore": "._store",
    },
)
