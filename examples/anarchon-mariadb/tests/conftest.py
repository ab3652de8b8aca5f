"""Every test here needs the MariaDB server: they carry the ``services`` marker, so that
``pytest -m "not services"`` leaves them out. (This example stands alone, as a third party's
backend would: it needs nothing from the workspace's test helpers.)"""

from __future__ import annotations

from pathlib import Path

import pytest

HERE = Path(__file__).parent


def pytest_configure(config: pytest.Config) -> None:
    # Registered here too: run from this folder, the example's own pytest configuration applies.
    config.addinivalue_line("markers", "services: needs a server (here MariaDB)")


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    for item in items:
        if item.path.is_relative_to(HERE):
            item.add_marker("services")
