"""anarchon-postgres: the PostgreSQL backend, ``postgresql://user@host/db``.

Each claim is one call of a server-side function that serializes the claims of a job on a row
lock; runs hold leases and are fenced by token (DESIGN section 5). `anarchon_postgres.testing`
holds backdoors for tests.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from anarchon.plugins import lazy_exports

if TYPE_CHECKING:
    from ._options import PostgresOptions
    from ._schema import SCHEMA_VERSION
    from ._store import PostgresStore

__all__ = ["SCHEMA_VERSION", "PostgresOptions", "PostgresStore"]

# The driver is imported when a name is first used, not when the plugin registers the backend.
__getattr__ = lazy_exports(
    __name__,
    {
        "PostgresOptions": "._options",
        "SCHEMA_VERSION": "._schema",
        "PostgresStore": "._store",
    },
)
