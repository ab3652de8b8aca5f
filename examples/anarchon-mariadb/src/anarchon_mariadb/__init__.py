"""anarchon-mariadb: a worked example of a third-party anarchon backend, ``mariadb://``.

Written only against anarchon's public contract (`anarchon.abc.LeaseStore`, the values exported
by `anarchon`, and `anarchon.hookimpl`), and certified by `anarchon-conformance`.
"""

from __future__ import annotations

from ._store import MariaDBOptions, MariaDBStore

__all__ = ["MariaDBOptions", "MariaDBStore"]
