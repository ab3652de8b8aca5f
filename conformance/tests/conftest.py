"""Markers for the kit's checks certified here: they are defined in the kit, so they cannot carry
the repository's ``processes`` and ``slow`` markers themselves (anarchon_test_support.markers)."""

from __future__ import annotations

from pathlib import Path

import pytest

from anarchon_test_support.markers import PROCESSES, SLOW, mark_tests

HERE = Path(__file__).parent


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    clockless = HERE / "test_clockless_conformance.py"
    mark_tests(items, clockless, PROCESSES, {"test_C1_single_winner_processes"})
    # A clockless store keeps its records past retention for the kit's 5 s wait (then it skips).
    mark_tests(
        items,
        clockless,
        SLOW,
        {
            "test_S1_forgotten_slot_is_late_and_writes_nothing",
            "test_S1_L11_a_skip_record_is_forgotten_like_a_run",
        },
    )
    mark_tests(items, HERE, SLOW, {"test_C5_early_claims_never_win_twice"})
