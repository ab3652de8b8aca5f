"""Named Hypothesis profiles of the kit's stateful test: ``dev``, ``ci`` (derandomized, no example
database), ``nightly``, and ``smoke`` (derandomized, no shrinking: the kit's own mutation checks,
which only need to know that a broken backend fails).

Pick one with ``--hypothesis-profile NAME`` or ``ANARCHON_HYPOTHESIS_PROFILE=NAME``; without
either, ``ci`` when the ``CI`` environment variable is set, else ``dev``. A profile of the same name
that the project registered itself is left alone and used.
"""

from __future__ import annotations

import os
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    import hypothesis
    import pytest

__all__ = ["PROFILES", "PROFILE_ENV", "profile_name", "register_profiles", "stateful_settings"]

PROFILE_ENV = "ANARCHON_HYPOTHESIS_PROFILE"

PROFILES: dict[str, dict[str, Any]] = {
    "dev": {"max_examples": 25, "stateful_step_count": 25},
    "ci": {"max_examples": 40, "stateful_step_count": 30, "derandomize": True, "database": None},
    "nightly": {"max_examples": 500, "stateful_step_count": 60},
    "smoke": {
        "max_examples": 40,
        "stateful_step_count": 30,
        "derandomize": True,
        "database": None,
        "phases": ("explicit", "reuse", "generate"),
    },
}


def register_profiles() -> None:
    """Register the kit's profiles under names not taken yet. Idempotent."""
    from hypothesis import HealthCheck, Phase, settings
    from hypothesis.errors import InvalidArgument

    for name, values in PROFILES.items():
        try:
            settings.get_profile(name)
        except InvalidArgument:
            chosen = dict(values)
            if "phases" in chosen:
                chosen["phases"] = [Phase[p] for p in chosen["phases"]]
            settings.register_profile(
                name,
                deadline=None,
                suppress_health_check=[HealthCheck.too_slow, HealthCheck.filter_too_much],
                **chosen,
            )


def profile_name(config: pytest.Config | None = None) -> str:
    """The profile the stateful test runs with (see the module docstring)."""
    if os.environ.get(PROFILE_ENV):
        return os.environ[PROFILE_ENV]
    if config is not None:
        chosen = config.getoption("hypothesis_profile", default=None)
        if chosen:
            return str(chosen)
    return "ci" if os.environ.get("CI") else "dev"


def stateful_settings(config: pytest.Config | None = None) -> hypothesis.settings:
    """The chosen profile, with no deadline: every step is a round trip to a real store."""
    from hypothesis import settings

    register_profiles()
    return settings(settings.get_profile(profile_name(config)), deadline=None)
