"""No store credential ever shows, whatever characters it holds (issue 21, item 1).

Hypothesis writes store URLs of every scheme with a secret in each place a URL carries one
(``user:SECRET@``, ``:SECRET@``, a NATS token ``SECRET@``, ``?password=SECRET``), drawn from every
character class (URL delimiters, whitespace, controls, fullwidth look-alikes that NFKC turns into
delimiters, any Unicode, lone surrogates), written as is, percent-encoded, or with only the
delimiters encoded. Then it checks that no 4 characters in a row of the secret (as written, as
decoded, percent-encoded, or escaped by ``repr`` or JSON) appear in anything anarchon makes from
the URL. JSON is checked as written with ``ensure_ascii`` and without.

Every secret has one of `MARKERS` at least every 4 characters, so a 4-character window can only
be found in the output when the secret leaked (a window such as ``127.`` could be any text's).

Two tests: `test_nothing_made_from_a_url_shows_its_secret` needs no server and runs 200 examples;
`test_opening_a_store_shows_no_secret` opens every store against a closed loopback port (so it
fails fast), runs the CLI and a scheduler, and is slower (10 examples, about 1 s each). The long profile
(``ANARCHON_HYPOTHESIS_PROFILE=nightly``, ``nox -s redaction``) runs thousands.
"""

from __future__ import annotations

import asyncio
import json
import logging
import os
import socket
import tempfile
import traceback
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any
from urllib.parse import quote, quote_plus, unquote, unquote_plus

import attrs
import pytest
from click.testing import CliRunner
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import anarchon
from anarchon import AnarchonError, Scheduler, StoreURL, hookimpl
from anarchon.cli import cli
from anarchon.plugins import plugin_manager

LONG = os.environ.get("ANARCHON_HYPOTHESIS_PROFILE") == "nightly"
"""The long profile, as the conformance kit names it (``nox -s redaction`` sets it)."""
QUICK_EXAMPLES = 5000 if LONG else 200
OPENING_EXAMPLES = 400 if LONG else 10
long_enough = pytest.mark.timeout(3600 if LONG else 300)
"""The whole run of a Hypothesis test counts against pytest-timeout's limit."""

WINDOW = 4
"""A leak is this many characters of a secret in a row."""

ALL_SCHEMES = ("sqlite", "postgresql", "redis", "rediss", "amqp", "amqps", "nats", "tls", "memory")
TOKEN_SCHEMES = ("nats", "tls")
"""Schemes whose URL carries a token as its user name (``nats://TOKEN@host``)."""


def _installed(scheme: str) -> bool:
    try:
        plugin_manager().backend(scheme)
    except AnarchonError:
        return False
    return True


SCHEMES = [s for s in ALL_SCHEMES if _installed(s)]


def _closed_port() -> int:
    """A loopback port nothing listens on: a connection is refused at once."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


PORT = _closed_port()

MARKERS = "~§Ж"
"""One of these at least every `WINDOW` characters of a secret (see the module docstring)."""
DELIMITERS = "/?#@:%&=+;,[]\\ \t\r\n\x00\x7f'\"<>`{}|^$!*()."
FULLWIDTH = "\uff0f\uff1f\uff03\uff20\uff1a\uff05"
"""NFKC turns these into URL delimiters (`urllib` checks a host for them)."""
SURROGATES = "\udcff\udc80\ud800"
"""Lone surrogates: undecodable bytes on a command line become these."""

_chars = st.one_of(
    st.sampled_from(DELIMITERS + FULLWIDTH + SURROGATES),
    st.characters(min_codepoint=0x21, max_codepoint=0x7E),
    st.characters(codec="utf-8"),
)
secrets = st.lists(
    st.tuples(st.sampled_from(MARKERS), st.text(_chars, max_size=WINDOW - 1)),
    min_size=WINDOW,
    max_size=10,
).map(lambda parts: "".join(marker + text for marker, text in parts))

PLACES = ("password", "bare", "token", "query")
"""``user:S@``, ``:S@``, a token ``S@`` (`TOKEN_SCHEMES` only), ``?password=S``."""


@attrs.frozen
class Case:
    scheme: str
    place: str
    """One of `PLACES`."""
    secret: str
    written: str
    """The secret as it stands in the URL."""
    url: str
    marked: bool = True
    """The secret has a marker in every window (generated ones do)."""

    def forms(self) -> set[str]:
        """The secret as written, as decoded, percent-encoded as a driver gets it; and these as
        ``repr`` and JSON escape them."""
        decoded = unquote_plus(self.written) if self.place == "query" else unquote(self.written)
        forms = {
            self.secret,
            self.written,
            decoded,
            quote(decoded, safe="", errors="surrogatepass"),
        }
        forms |= {repr(form)[1:-1] for form in forms}
        if not self.marked:  # JSON's \\u0000 holds 0000, a window of any text
            return forms
        return forms | {json.dumps(form, ensure_ascii=False)[1:-1] for form in forms}

    def windows(self) -> set[str]:
        """Every `WINDOW` characters in a row of a form; of a marked secret, those that hold a
        marker or a ``%`` (in the forms as written and decoded every window does; an escape such
        as ``\\u0000`` or the tail of ``%C2%A7`` is not the secret's)."""
        return {
            form[i : i + WINDOW]
            for form in self.forms()
            for i in range(len(form) - WINDOW + 1)
            if not self.marked or any(c in form[i : i + WINDOW] for c in MARKERS + "%")
        }


def _write(secret: str, how: str, *, place: str) -> str:
    """`secret` as written in the URL at `place`, `how`: ``raw``, ``encoded`` or ``delimiters``
    (only those that break a URL apart encoded). By the URL's grammar a ':' ends a token (a user
    name) and a '&' a query value, whatever follows being a password or another parameter: those
    two are always encoded there."""
    query = place == "query"
    if place == "token":
        return _write(secret, how, place="password").replace(":", "%3A")
    if how == "raw":
        return secret.replace("&", "%26") if query else secret
    if how == "encoded":
        return (quote_plus if query else quote)(secret, safe="", errors="surrogatepass")
    # Only what would break the URL apart, as a careful user writes it.
    delimiters = "/?#@%&+" if query else "/?#@%"
    return "".join(quote(c, safe="") if c in delimiters else c for c in secret)


def make_case(
    scheme: str,
    place: str,
    secret: str,
    *,
    how: str = "raw",
    user: str = "app",
    query: str = "",
    sqlite_host: str = "",
    directory: str = "/nonexistent/anarchon-fuzz",
    marked: bool = True,
) -> Case:
    """The URL of `scheme` with `secret` at `place`, at a closed loopback port (SQLite: a file in
    `directory`, on `sqlite_host`; memory: a named store)."""
    written = _write(secret, how, place=place)
    if scheme == "sqlite":
        address = sqlite_host + "/" + os.path.join(directory, "fuzz.db")
    elif scheme == "memory":
        address = "fuzz"
    else:
        path = {"postgresql": "/db", "redis": "/0", "rediss": "/0", "amqp": "/", "amqps": "/"}
        address = f"127.0.0.1:{PORT}{path.get(scheme, '')}"
    userinfo = {"password": f"{user}:{written}@", "bare": f":{written}@", "token": f"{written}@"}
    if place == "query":
        query = (query + "&" if query else "?") + f"password={written}"
    url = f"{scheme}://{userinfo.get(place, '')}{address}{query}"
    return Case(scheme=scheme, place=place, secret=secret, written=written, url=url, marked=marked)


@st.composite
def cases(draw: st.DrawFn, directory: str = "/nonexistent/anarchon-fuzz") -> Case:
    scheme = draw(st.sampled_from(SCHEMES))
    places = [p for p in PLACES if p != "token" or scheme in TOKEN_SCHEMES]
    return make_case(
        scheme,
        draw(st.sampled_from(places)),
        draw(secrets),
        how=draw(st.sampled_from(["raw", "encoded", "delimiters"])),
        user=draw(st.sampled_from(["app", "", "u.ser-1_x"])),
        query=draw(st.sampled_from(["", "?prefix=fuzz"])),
        sqlite_host=draw(st.sampled_from(["", "127.0.0.1"])),
        directory=directory,
    )


NASTY = [
    "pw x",  # the example of issue 21
    "pw/xy",
    "s3cr?et",
    "s3cr#et",
    "ab@cdef",
    "pw\txy",
    "pw\nxy",
    "pw\uff03xy",  # a fullwidth #
    "ab\x00cd",
    "ab%00cd",
    "ab%zzcd",
    "ab%2Fcd",
    "ab\udcffcd",
    "ab:cd:ef",
    "ab&cd=ef",
    "ab+cd ef",
]
"""Secrets with each delimiter and oddity, unmarked: each is checked in every place of every
scheme, whatever the generator happens to draw."""


# -- collecting what anarchon shows ---------------------------------------------------------------


class Shown:
    """Every text anarchon made while a case ran."""

    def __init__(self) -> None:
        self.texts: list[tuple[str, str]] = []

    def add(self, where: str, text: object) -> None:
        self.texts.append((where, text if isinstance(text, str) else repr(text)))

    def error(self, where: str, exc: BaseException) -> None:
        self.add(f"{where}: str(error)", str(exc))
        self.add(f"{where}: repr(error)", repr(exc))
        self.add(f"{where}: traceback", "".join(traceback.format_exception_only(exc)))

    def json(self, where: str, data: Any) -> None:
        self.add(where, json.dumps(data, default=str))
        self.add(where + " (ensure_ascii=False)", json.dumps(data, default=str, ensure_ascii=False))

    def check(self, case: Case) -> None:
        windows = case.windows()
        for where, text in self.texts:
            found = sorted(w for w in windows if w in text)
            assert not found, (
                f"{case.url!r}: the secret {case.secret!r} shows in {where} "
                f"(as {found[0]!r}):\n{text}"
            )


class _Records(logging.Handler):
    def __init__(self, shown: Shown) -> None:
        super().__init__(logging.DEBUG)
        self.shown = shown
        self.setFormatter(logging.Formatter("%(name)s %(levelname)s %(message)s"))

    def emit(self, record: logging.LogRecord) -> None:
        try:
            text = self.format(record)
        except Exception as exc:  # noqa: BLE001 - a record that cannot format is still shown
            text = f"{record.msg!r} {record.args!r} ({exc!r})"
        self.shown.add(f"log record of {record.name}", text)
        self.shown.add(f"log record of {record.name} (fields)", repr(vars(record)))


@contextmanager
def logs_into(shown: Shown) -> Iterator[None]:
    """Every log record, of every logger and level, into `shown`."""
    root = logging.getLogger()
    handlers, level = root.handlers[:], root.level
    handler = _Records(shown)
    root.addHandler(handler)
    root.setLevel(logging.DEBUG)
    try:
        yield
    finally:
        root.handlers[:] = handlers
        root.setLevel(level)


class StoreErrors:
    """An observer: what the plugin hooks get (the OTel and Prometheus plugins' input)."""

    def __init__(self, shown: Shown) -> None:
        self.shown = shown

    @hookimpl
    def anarchon_store_error(self, store: str, operation: str, error: BaseException) -> None:
        self.shown.add("store_error hook: store", store)
        self.shown.error("store_error hook", error)


# -- the tests ------------------------------------------------------------------------------------


def _show_made_from(case: Case, shown: Shown) -> None:
    """Parse, build a store, build a scheduler: no server involved."""
    try:
        url = StoreURL.parse(case.url)
    except AnarchonError as exc:
        shown.error("StoreURL.parse", exc)
    else:
        shown.add("str(StoreURL)", str(url))
        shown.add("repr(StoreURL)", repr(url))
        shown.add("StoreURL in an f-string", f"{url}")
        try:
            url.options()
        except AnarchonError as exc:
            shown.error("StoreURL.options", exc)
    try:
        store = anarchon.create_store(case.url)
    except AnarchonError as exc:
        shown.error("create_store", exc)
    else:
        shown.add("repr(store)", repr(store))
        shown.add("str(store)", str(store))
    try:
        scheduler = Scheduler(case.url, environ={})
    except AnarchonError as exc:
        shown.error("Scheduler()", exc)
    else:
        shown.json("Scheduler.health().to_dict()", scheduler.health().to_dict())
        shown.add("repr(Scheduler.settings)", repr(scheduler.settings))


@long_enough
@settings(
    max_examples=QUICK_EXAMPLES,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow],
)
@given(case=cases())
@pytest.mark.slow
def test_nothing_made_from_a_url_shows_its_secret(case: Case) -> None:
    shown = Shown()
    with logs_into(shown):
        _show_made_from(case, shown)
    shown.check(case)


@pytest.mark.parametrize(
    ("scheme", "place", "secret"),
    [
        pytest.param(scheme, place, secret, id=f"{scheme}-{place}-{secret!r}")
        for scheme in SCHEMES
        for place in PLACES
        if place != "token" or scheme in TOKEN_SCHEMES
        for secret in NASTY
    ],
)
def test_nasty_secrets_in_every_place_show_nowhere(scheme: str, place: str, secret: str) -> None:
    case = make_case(scheme, place, secret, marked=False)
    shown = Shown()
    with logs_into(shown):
        _show_made_from(case, shown)
    shown.check(case)


def _invoke(*args: str) -> str:
    result = CliRunner().invoke(cli, ["--log-level", "DEBUG", *args], prog_name="anarchon")
    text = result.output
    if result.exception is not None and not isinstance(result.exception, SystemExit):
        text += "".join(traceback.format_exception(result.exception))
    return text


async def _connect(url: str, shown: Shown) -> None:
    try:
        store = await anarchon.connect(url)
    except AnarchonError as exc:
        shown.error("anarchon.connect", exc)
    else:
        shown.add("repr(opened store)", repr(store))
        await store.close()


async def _start(url: str, shown: Shown) -> None:
    """A scheduler that starts degraded (the store refuses), and its health."""
    try:
        scheduler = Scheduler(url, environ={}, start_timeout="2s")
    except AnarchonError as exc:
        shown.error("Scheduler()", exc)
        return
    try:
        await scheduler.start()
    except AnarchonError as exc:
        shown.error("Scheduler.start", exc)
    shown.json("Scheduler.health().to_dict() after start", scheduler.health().to_dict())
    await scheduler.stop()


async def _open_and_start(url: str, shown: Shown) -> None:
    await asyncio.gather(_connect(url, shown), _start(url, shown))


def _open(case: Case, shown: Shown) -> None:
    observer = StoreErrors(shown)
    manager = plugin_manager()
    manager.register(observer)
    try:
        with logs_into(shown):
            asyncio.run(_open_and_start(case.url, shown))
            shown.add("anarchon history", _invoke("history", case.url, "job"))
            shown.add("anarchon status", _invoke("status", case.url, "--once"))
    finally:
        manager.unregister(observer)


@long_enough
@settings(
    max_examples=OPENING_EXAMPLES,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow],
)
@given(data=st.data())
@pytest.mark.slow
def test_opening_a_store_shows_no_secret(data: st.DataObject) -> None:
    with tempfile.TemporaryDirectory() as directory:
        case = data.draw(cases(directory))
        shown = Shown()
        _open(case, shown)
        shown.check(case)


@pytest.mark.slow
def test_opening_the_store_of_issue_21_shows_no_secret() -> None:
    case = make_case("redis", "password", "pw x", user="u", marked=False)
    shown = Shown()
    _open(case, shown)
    shown.check(case)
