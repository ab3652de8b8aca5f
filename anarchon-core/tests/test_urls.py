from __future__ import annotations

import logging

import pytest

import anarchon
from anarchon import ConfigError, StoreURL, redact

SECRET = "s3cr3t-p4ss"


def test_password_never_in_str_or_repr() -> None:
    url = StoreURL.parse(f"redis://app:{SECRET}@localhost:6379/0?prefix=x")
    assert SECRET not in str(url)
    assert SECRET not in repr(url)
    assert "app:***@localhost" in str(url)
    assert url.password == SECRET
    assert url.secret().count(SECRET) == 1


def test_redact_every_url_in_a_text() -> None:
    text = f"failed: postgresql://u:{SECRET}@db/x and amqp://guest:{SECRET}@mq:5672/"
    assert SECRET not in redact(text)


def test_parts() -> None:
    url = StoreURL.parse("sqlite:///data/anarchon.db?busy_timeout_ms=10")
    assert (url.scheme, url.path, url.options()) == (
        "sqlite",
        "data/anarchon.db",
        {"busy_timeout_ms": "10"},
    )
    assert StoreURL.parse("sqlite:////abs/x.db").path == "/abs/x.db"


@pytest.mark.parametrize(
    ("url", "message"),
    [
        ("localhost:6379", "has no scheme"),
        ("redis://h:notaport/0", "is malformed"),
        ("1redis://h", "invalid scheme"),
    ],
)
def test_bad_urls(url: str, message: str) -> None:
    with pytest.raises(ConfigError, match=message):
        StoreURL.parse(url)


def test_repeated_option_is_an_error() -> None:
    with pytest.raises(ConfigError, match="'prefix' appears twice"):
        StoreURL.parse("memory://x?prefix=a&prefix=b").options()


def test_secret_absent_from_errors_and_logs(caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.DEBUG)
    for bad in (
        f"nosuch://u:{SECRET}@h/x",
        f"memory://u:{SECRET}@h/x?bogus=1",
        f"redis://u:{SECRET}@h:port/0",
    ):
        with pytest.raises(ConfigError) as info:
            anarchon.create_store(bad)
        assert SECRET not in str(info.value)
        assert SECRET not in repr(info.value)
    assert SECRET not in caplog.text
