"""anarchon-sqlite: the embedded SQLite backend, ``sqlite:///path``.

Each claim is one ``BEGIN IMMEDIATE`` transaction on a local SQLite file; runs hold leases and are
fenced by token (DESIGN section 5). `anarchon_sqlite.testing` holds the conformance backdoors.
"""

from __future__ import annotations

from ._options import SQLiteOptions
from ._schema import SCHEMA_VERSION
from ._store import SQLiteStore

__all__ = ["SCHEMA_VERSION", "SQLiteOptions", "SQLiteStore"]
