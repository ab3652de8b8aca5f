from __future__ import annotations

from datetime import timedelta

import pytest

from anarchon import ConfigError, to_ms


@pytest.mark.parametrize(
    ("value", "ms"),
    [
        (1500, 1500),
        ("1500", 1500),
        ("500ms", 500),
        ("30s", 30_000),
        ("2m", 120_000),
        ("1h", 3_600_000),
        ("1m30s", 90_000),
        ("1.5s", 1500),
        (" 2 m ", 120_000),
        (timedelta(seconds=3), 3000),
        (timedelta(days=1), 86_400_000),
    ],
)
def test_durations_accepted(value: object, ms: int) -> None:
    assert to_ms(value) == ms


@pytest.mark.parametrize(
    ("value", "message"),
    [
        pytest.param(0, "must be positive", id="zero"),
        pytest.param(-5, "must be positive", id="negative int"),
        pytest.param(timedelta(seconds=-1), "must be positive", id="negative timedelta"),
        pytest.param("-5s", "is not a duration", id="negative string"),
        pytest.param("5 parsecs", "is not a duration", id="unknown unit"),
        pytest.param("", "is not a duration", id="empty"),
        pytest.param("400d", "longer than a year", id="absurd"),
        pytest.param(10**12, "longer than a year", id="absurd int"),
        pytest.param(1.5, "whole milliseconds", id="float"),
        pytest.param(True, "got a bool", id="bool"),
        pytest.param(None, "got NoneType", id="None"),
        pytest.param("0.5ms", "not a whole number", id="fraction of a ms"),
    ],
)
def test_bad_durations_say_why(value: object, message: str) -> None:
    with pytest.raises(ConfigError, match=message):
        to_ms(value, what="lease")


def test_zero_allowed_when_asked() -> None:
    assert to_ms(0, allow_zero=True) == 0
