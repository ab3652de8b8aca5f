from __future__ import annotations

import pytest

from anarchon import ClaimRequest, ConfigError, check_name


@pytest.mark.parametrize("name", ["a", "sync", "Job_1-x", "0", "x" * 100])
def test_valid_names_pass(name: str) -> None:
    assert check_name(name) == name


@pytest.mark.parametrize(
    ("name", "problem"),
    [
        pytest.param("a b", "contains ' '", id="a space"),
        pytest.param("", "is empty", id="empty"),
        pytest.param("x" * 101, "is 101 characters long", id="too long"),
        pytest.param("a:b", "contains ':'", id="a colon"),
        pytest.param("é", "starts with 'é'", id="non-ascii"),
        pytest.param("_x", "starts with '_'", id="leading underscore"),
        pytest.param("a.b", "contains '.'", id="a dot"),
    ],
)
def test_invalid_job_names_say_what_is_wrong(name: str, problem: str) -> None:
    with pytest.raises(ConfigError) as info:
        check_name(name)
    message = str(info.value)
    assert problem in message
    assert "ASCII letters, digits" in message


def test_invalid_job_name_is_refused_by_claim_request() -> None:
    with pytest.raises(ConfigError, match="job name 'a b' contains ' '"):
        ClaimRequest(job="a b", slot=0, instance="i")


def test_non_string_name() -> None:
    with pytest.raises(ConfigError, match="must be a string, got int"):
        check_name(5)


def test_prefix_errors_say_prefix() -> None:
    with pytest.raises(ConfigError, match="prefix 'a/b' contains '/'"):
        check_name("a/b", what="prefix")
