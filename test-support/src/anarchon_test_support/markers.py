"""The ``services`` marker: a test that needs a running server (PostgreSQL, Redis, RabbitMQ, NATS,
MariaDB, or a private server process it starts from an installed binary).

``pytest -m "not services"`` runs the pure tests (memory://, SQLite, the kit's own checks) in
seconds on a machine with no service. Backend packages whose every test needs a server mark them
all from their ``conftest.py``::

    def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
        mark_services(items, Path(__file__).parent)

Elsewhere a test, a parameter or a module carries ``pytest.mark.services`` itself.
"""

from __future__ import annotations

from collections.abc import Iterable
from pathlib import Path

import pytest

__all__ = ["SERVICES", "mark_services"]

SERVICES = "services"


def mark_services(items: Iterable[pytest.Item], folder: Path) -> None:
    """Give every collected test under `folder` the ``services`` marker.

    A conftest's ``pytest_collection_modifyitems`` sees every item of the session, not only its
    folder's, hence the filter."""
    for item in items:
        if item.path.is_relative_to(folder):
            item.add_marker(SERVICES)
