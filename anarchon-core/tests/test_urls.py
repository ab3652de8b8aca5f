from __future__ import annotations

import logging
from urllib.parse import quote, unquote

import pytest

import anarchon
from anarchon import ConfigError, StoreURL, redact
from anarchon._runtime.settings import Settings

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


# -- how a URL is split, and what is shown (issue 21) ---------------------------------------------


def test_an_unencoded_at_sign_belongs_to_the_password() -> None:
    url = StoreURL.parse("redis://app:p@ss@w0rd@cache:6380/2")
    assert (url.username, url.password, url.host, url.port, url.path) == (
        "app",
        "p@ss@w0rd",
        "cache",
        6380,
        "2",
    )
    assert str(url) == "redis://app:***@cache:6380/2"


@pytest.mark.parametrize(
    "url",
    [
        "redis://u:pw/xy@127.0.0.1:1/5",
        "amqp://u:s3cr?et@127.0.0.1:1/",
        "nats://u:s3cr#et@127.0.0.1:1",
        "redis://cache/0?prefix=a@b",
        "postgresql://db/app?password=s3cr@et",
    ],
)
def test_a_url_that_reads_two_ways_is_refused_showing_neither(url: str) -> None:
    with pytest.raises(ConfigError, match="reads two ways") as info:
        StoreURL.parse(url)
    message = str(info.value)
    assert "%2F" in message and "%40" in message  # the fix
    assert url.split("://")[0] + "://***'" in message
    for piece in ("pw", "s3cr", "et", "xy", "cache", "127"):
        assert piece not in message.split("'")[1]


@pytest.mark.parametrize("password", ["pw x", "pw\tx", "p\u00e4ss", "p%41ss", "100%", "a:b"])
def test_any_password_is_the_text_between_the_first_colon_and_the_last_at(password: str) -> None:
    url = StoreURL.parse(f"redis://app:{password}@cache/0")
    assert url.password == unquote(password)
    assert url.host == "cache"
    assert str(url) == "redis://app:***@cache/0"


def test_drivers_split_the_url_as_parse_did() -> None:
    """`secret()` percent-encodes the userinfo, so redis-py, libpq and yarl (aiormq) read the
    same user and password, whatever they hold."""
    redis_connection = pytest.importorskip("redis.connection")
    conninfo = pytest.importorskip("psycopg.conninfo")
    yarl = pytest.importorskip("yarl")
    for password in ["p@ss w%zz:x+y!$&'()*,;=\u00e4", "pw\tx", "%2F%3F%23", "a:b:c"]:
        url = StoreURL.parse(f"redis://us er:{password}@h:1/0?prefix=x")
        assert redis_connection.parse_url(url.without_query())["password"] == url.password
        libpq = conninfo.conninfo_to_dict("postgresql" + url.without_query()[5:])
        assert (libpq["user"], libpq["password"]) == (url.username, url.password)
        assert yarl.URL(url.secret()).password == url.password


def test_a_token_is_hidden_and_a_user_name_alone_is_not() -> None:
    assert str(StoreURL.parse("nats://s3cr3tt0ken@nats:4222")) == "nats://***@nats:4222"
    assert str(StoreURL.parse("tls://s3cr3tt0ken@nats")) == "tls://***@nats"
    assert str(StoreURL.parse("nats://s3cr%3A3tt0ken@nats")) == "nats://***@nats"
    assert str(StoreURL.parse("nats://app:s3cr3t@nats")) == "nats://app:***@nats"
    assert str(StoreURL.parse("postgresql://app@db/x")) == "postgresql://app@db/x"


def test_secret_query_parameters_and_what_follows_them_are_hidden() -> None:
    url = StoreURL.parse(f"postgresql://db/x?sslmode=require&password={SECRET}&prefix=a#frag")
    assert str(url) == "postgresql://db/x?sslmode=require&password=***&..."
    assert url.options()["password"] == SECRET


def test_lone_surrogates_are_refused_without_showing_the_password() -> None:
    with pytest.raises(ConfigError, match="not Unicode") as info:
        StoreURL.parse("redis://u:pw\udcffxyz@h/0")
    assert "pw" not in str(info.value) and "xyz" not in str(info.value)


def test_an_unparsable_url_shows_nothing_before_its_last_at() -> None:
    for bad in (f"redis:/u:{SECRET}@h", f"u:{SECRET}@h:6379", f"1redis://u:{SECRET}@h"):
        with pytest.raises(ConfigError) as info:
            StoreURL.parse(bad)
        assert SECRET not in str(info.value)
        assert SECRET[:4] not in str(info.value)


def test_redact_hides_the_passwords_of_parsed_urls_in_any_text() -> None:
    password = "pw x?y#z"
    StoreURL.parse(f"redis://app:{quote(password, safe='')}@h/0")
    assert redact(f"driver said: bad password {password!r}") == "driver said: bad password '***'"
    StoreURL.parse("redis://app:abc@h/0")  # shorter than 4: would mangle text
    assert redact("abc") == "abc"
    StoreURL.parse("postgresql://postgres:postgres@db/test")
    assert redact("role postgres at postgresql://db") == "role *** at postgresql://db"


def test_redact_reads_userinfo_up_to_the_last_at() -> None:
    assert redact("to redis://u:a@b@c:1/0 failed") == "to redis://u:***@c:1/0 failed"
    assert redact("nats://t0k3n@h:4222 down") == "nats://***@h:4222 down"


def test_settings_repr_hides_the_store_password() -> None:
    settings = Settings(store=f"redis://app:{SECRET}@h/0")
    assert SECRET not in repr(settings)
    assert "redis://app:***@h/0" in repr(settings)


def test_a_host_list_is_read_host_by_host_and_shown_without_its_password() -> None:
    url = StoreURL.parse(
        f"postgresql://app:{SECRET}@10.0.0.1:5432,[::1]:5433,db3/test"
        "?target_session_attrs=read-write"
    )
    assert url.hosts == (("10.0.0.1", 5432), ("::1", 5433), ("db3", None))
    assert (url.host, url.port, url.path) == ("10.0.0.1", 5432, "test")
    assert str(url) == (
        "postgresql://app:***@10.0.0.1:5432,[::1]:5433,db3/test?target_session_attrs=read-write"
    )
    assert url.without_query() == f"postgresql://app:{SECRET}@10.0.0.1:5432,[::1]:5433,db3/test"
    assert redact(f"connection to {url.secret()} failed") == (
        "connection to postgresql://app:***@10.0.0.1:5432,[::1]:5433,db3/test"
        "?target_session_attrs=read-write failed"
    )


def test_a_bad_host_list_names_the_entry() -> None:
    with pytest.raises(ConfigError, match="host 2 of the host list is empty"):
        StoreURL.parse(f"postgresql://app:{SECRET}@h1:5432,,h2/test")
    with pytest.raises(ConfigError, match="malformed") as info:
        StoreURL.parse(f"postgresql://app:{SECRET}@h1:5432,h2:port/test")
    assert SECRET not in str(info.value)


def test_several_hosts_comma_separated() -> None:
    url = StoreURL.parse("nats://u:pw-9f2a@h1:4222,h2:4223,[::1]:4224?replicas=3")
    assert url.hosts == (("h1", 4222), ("h2", 4223), ("::1", 4224))
    assert (url.host, url.port) == ("h1", 4222)
    assert str(url) == "nats://u:***@h1:4222,h2:4223,[::1]:4224?replicas=3"
    assert StoreURL.parse("redis://h:6379/0").hosts == (("h", 6379),)
    for bad in ("nats://h1:4222,,h2:4222", "nats://h1:x,h2:4222"):
        with pytest.raises(ConfigError, match="is malformed"):
            StoreURL.parse(bad)
