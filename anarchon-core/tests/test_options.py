from __future__ import annotations

from datetime import timedelta

import attrs
import pytest

import anarchon
from anarchon import ConfigError, MemoryStore
from anarchon._options import structure_options


def test_url_query_and_keywords_are_options() -> None:
    store = anarchon.create_store("memory://?prefix=app&history_limit=5", retention_margin_ms="2m")
    assert isinstance(store, MemoryStore)
    assert store.options.prefix == "app"
    assert store.options.history_limit == 5
    assert store.options.retention_margin_ms == 120_000


def test_keyword_wins_over_query() -> None:
    store = anarchon.create_store("memory://?prefix=a", prefix="b")
    assert isinstance(store, MemoryStore)
    assert store.options.prefix == "b"


def test_timedelta_duration_option() -> None:
    store = anarchon.create_store("memory://", retention_margin_ms=timedelta(seconds=1))
    assert isinstance(store, MemoryStore)
    assert store.options.retention_margin_ms == 1000


def test_unknown_option_lists_valid_ones() -> None:
    with pytest.raises(ConfigError) as info:
        anarchon.create_store("memory://?strategy=lease")
    assert str(info.value) == (
        "invalid options for memory://: unknown option strategy for memory://; "
        "valid options: history_limit, prefix, retention_margin_ms"
    )


@pytest.mark.parametrize(
    ("options", "message"),
    [
        ({"history_limit": "many"}, "option history_limit: expected an integer, got 'many'"),
        ({"history_limit": 0}, "history_limit must be from 1 to 1000000, got 0"),
        ({"retention_margin_ms": -1}, "duration must be positive, got -1"),
        ({"retention_margin_ms": "10 years"}, "is not a duration"),
        ({"prefix": ""}, "prefix '' is empty"),
    ],
)
def test_ill_typed_options(options: dict[str, object], message: str) -> None:
    with pytest.raises(ConfigError) as info:
        anarchon.create_store("memory://", **options)
    assert message in str(info.value)


@attrs.frozen(kw_only=True)
class _Pauses(anarchon.StoreOptions):
    pause_ms: anarchon.DurationMsOrZero = attrs.field(default=anarchon.DurationMsOrZero(5))


@pytest.mark.parametrize(("given", "expected"), [("0", 0), ("0s", 0), (0, 0), ("2s", 2000)])
def test_a_duration_or_zero_option_takes_zero(given: object, expected: int) -> None:
    options = structure_options(_Pauses, {"pause_ms": given}, where="test://")
    assert options.pause_ms == expected


def test_a_duration_or_zero_option_refuses_negatives_saying_zero_is_allowed() -> None:
    with pytest.raises(ConfigError, match="pause_ms: duration must be 0 or more"):
        structure_options(_Pauses, {"pause_ms": -1}, where="test://")
