"""The failover harness's primary + streaming replica (`ReplicatedPair` in
bench/chaos/topologies/postgres_failover.py), loaded from that file so that the tests and the
harness break the same servers the same way (``bench`` is not an installed package)."""

from __future__ import annotations

import importlib.util
import os
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import pytest

ROOT = Path(__file__).resolve().parents[2]
_FILE = ROOT / "bench" / "chaos" / "topologies" / "postgres_failover.py"


def _load() -> Any:
    name = "anarchon_pg_failover_topology"
    if name not in sys.modules:
        spec = importlib.util.spec_from_file_location(name, _FILE)
        assert spec is not None and spec.loader is not None
        module = importlib.util.module_from_spec(spec)
        sys.modules[name] = module
        spec.loader.exec_module(module)
    return sys.modules[name]


@contextmanager
def replicated_pair(synchronous_commit: str | None) -> Iterator[Any]:
    """A started pair (skip if the PostgreSQL binaries are missing), stopped afterwards."""
    if os.environ.get("ANARCHON_TEST_FAILOVER") != "1":
        pytest.skip(
            "the primary + replica failover tests run in `nox -s failover` "
            "(ANARCHON_TEST_FAILOVER=1): CI leaves them out until they pass reliably (the restart "
            "failure is fixed; 1 run in 8 still failed in stop 31, see its note)"
        )
    module = _load()
    if not (module.BIN / "pg_basebackup").exists():
        pytest.skip(f"pg_basebackup not found in {module.BIN}: set ANARCHON_TEST_POSTGRES_BIN")
    pair = module.ReplicatedPair(synchronous_commit)
    try:
        pair.start()
        yield pair
    finally:
        pair.stop()
