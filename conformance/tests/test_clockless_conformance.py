"""Certify a lease store with no clock of its own (`clockless_store`), as the kit must: it
judges leases and lateness by each instance's clock and says so (T1 for clockless stores)."""

from __future__ import annotations

import sys
from pathlib import Path

from anarchon_conformance import ConformanceSuite

# The store registers through `BackendHarness.plugins` by module name, here and in the claiming
# processes of the C1 and T1 checks (which inherit sys.path): this folder must be importable.
sys.path.insert(0, str(Path(__file__).parent))

from clockless_store import ClocklessHarness  # type: ignore[import-not-found]


class TestClocklessConformance(ConformanceSuite):
    harness_class = ClocklessHarness
