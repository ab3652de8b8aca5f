"""Store URLs, parsed once and never shown with their credentials.

How `StoreURL.parse` splits ``scheme://user:password@host:port/path?query#fragment``:

- The scheme is the text before the first ``://``, lower-cased.
- The userinfo is everything between ``://`` and the **last** ``@`` of the URL, so an unencoded
  ``@`` in a password is read as browsers and `urllib` read it. The user name ends at the first
  ``:`` of the userinfo; the rest, whatever it holds, is the password (None without a ``:``).
  Without an ``@`` a URL has no userinfo.
- The userinfo must not hold an unencoded ``/``, ``?`` or ``#``: with one of those before the last
  ``@`` the URL reads two ways (a password holding ``/``, or a path or query holding ``@``), and
  drivers differ on it, so it is refused, naming neither. In a password write ``%2F``, ``%3F``,
  ``%23``; after the host write ``@`` as ``%40``.
- What follows the userinfo (host, port, path, query) is read by `urllib.parse.urlsplit` without
  the userinfo, so no message about it can repeat a credential.
- A user name, password, host or query holding a lone surrogate (an undecodable byte from a
  command line) is refused: no driver could be given it.

Text is made from these parts, never from the URL as given: `str` and `repr` show ``user:***@``
for a password, ``***@`` for a user name alone where it is a token (``nats://TOKEN@host``; a
token, like any user name, has its ``:`` written ``%3A``), a query parameter whose name says it holds a secret (``password``, ``sslpassword``, ``token`` ...) as
``name=***`` with the parameters after it left out, and never the fragment. Drivers get
`StoreURL.secret` or `StoreURL.without_query`, where user name and password are percent-encoded,
so every driver splits the URL as `parse` did.

`redact` is for other text (a driver's message): it hides the userinfo of every URL in it, and
every credential of 4 characters or more of a URL this process parsed, in any of its spellings,
where it stands alone (not inside a longer word).
"""

from __future__ import annotations

import re
import threading
from urllib.parse import parse_qsl, quote, unquote, unquote_plus, urlsplit

import attrs

from ._errors import ConfigError

__all__ = ["StoreURL", "redact", "shown_url"]

_SCHEME = re.compile(r"[a-z][a-z0-9+.-]*")
_SHOWABLE_SCHEME = re.compile(r"[A-Za-z0-9+.-]{1,40}")
"""A bad scheme is named in the error only if it looks like one (not a piece of a password)."""
TOKEN_SCHEMES = frozenset({"nats", "tls"})
"""Schemes whose URL carries a token as its user name (``nats://TOKEN@host``)."""
_SECRET_NAME = re.compile(r"pass|pwd|secret|token|credential", re.IGNORECASE)
"""A query parameter with such a name holds a secret (libpq's ``password``, ``sslpassword``)."""
_URL_USERINFO = re.compile(r"(?P<scheme>[A-Za-z][A-Za-z0-9+.-]*)://(?P<userinfo>[^\s/?#]*)@")
"""A URL's userinfo in a text: up to the last ``@`` before a space, ``/``, ``?`` or ``#``."""
_LONE_PERCENT = re.compile(r"%(?![0-9A-Fa-f]{2})")
_USERINFO_SAFE = "!$&'()*+,;=%"
"""Kept as written in a driver's userinfo (RFC 3986 sub-delims, and escapes already made)."""

MIN_SECRET_LENGTH = 4
"""`redact` hides remembered credentials this long or longer (shorter ones would mangle text)."""
_MAX_REMEMBERED = 1024
_remembered: dict[str, None] = {}
"""Every spelling of the credentials of the URLs parsed so far (the oldest forgotten first)."""
_remembered_pattern: re.Pattern[str] | None = None
_remembered_lock = threading.Lock()


def _remember(*secrets: str) -> None:
    global _remembered_pattern
    with _remembered_lock:
        for secret in secrets:
            if len(secret) >= MIN_SECRET_LENGTH and secret not in _remembered:
                _remembered[secret] = None
                _remembered_pattern = None
                if len(_remembered) > _MAX_REMEMBERED:
                    del _remembered[next(iter(_remembered))]


def _remembered_secrets() -> re.Pattern[str] | None:
    """A pattern matching a remembered credential that is not part of a longer word (a password
    "postgres" leaves "postgresql://" alone); longest first."""
    global _remembered_pattern
    with _remembered_lock:
        if _remembered_pattern is None and _remembered:
            alternatives = "|".join(map(re.escape, sorted(_remembered, key=len, reverse=True)))
            _remembered_pattern = re.compile(rf"(?<![A-Za-z0-9])(?:{alternatives})(?![A-Za-z0-9])")
        return _remembered_pattern


def _hide_userinfo(match: re.Match[str]) -> str:
    scheme, userinfo = match["scheme"], match["userinfo"]
    return f"{scheme}://{_shown_userinfo(scheme.lower(), *_split_userinfo(userinfo))}"


def redact(text: str) -> str:
    """`text` with the userinfo of every URL in it hidden (``user:***@``), and every credential of
    a store URL parsed in this process (`StoreURL.parse`), wherever it stands alone (not inside a
    longer word), replaced by ``***``."""
    text = _URL_USERINFO.sub(_hide_userinfo, text)
    pattern = _remembered_secrets()
    return text if pattern is None else pattern.sub("***", text)


def _split_userinfo(userinfo: str) -> tuple[str, str | None]:
    user, colon, password = userinfo.partition(":")
    return user, password if colon else None


def _shown_userinfo(scheme: str, user: str, password: str | None) -> str:
    if password is not None:
        return f"{user}:***@"
    if user and scheme in TOKEN_SCHEMES:
        return "***@"
    return f"{user}@"


def _shown_rest(rest: str) -> str:
    """Host, port, path and query as written, without secret query values and the fragment."""
    before_fragment = rest.partition("#")[0]
    base, question, query = before_fragment.partition("?")
    if not question:
        return base
    shown: list[str] = []
    pieces = query.split("&")
    for index, piece in enumerate(pieces):
        name = piece.partition("=")[0]
        if _SECRET_NAME.search(unquote_plus(name)):
            # The value may hold an unencoded '&': what follows is not shown either.
            shown.append(f"{name}=***" + ("&..." if index < len(pieces) - 1 else ""))
            break
        shown.append(piece)
    return f"{base}?{'&'.join(shown)}"


def _shown(scheme: str, userinfo: tuple[str, str | None] | None, rest: str) -> str:
    """A parsed URL as it is shown (see the module's docstring)."""
    shown_userinfo = "" if userinfo is None else _shown_userinfo(scheme, *userinfo)
    return _printable(f"{scheme}://{shown_userinfo}{_shown_rest(rest)}")


def _printable(text: str) -> str:
    """`text` without lone surrogates (undecodable bytes), which no stream can write."""
    return text.encode("utf-8", "backslashreplace").decode("utf-8")


def _unparsed(url: str) -> str:
    """What an error may show of a URL that could not be parsed: its scheme if valid, nothing
    before its last ``@``, and nothing after it either if a ``/``, ``?`` or ``#`` comes before
    (the ``@`` may be in a password in the query)."""
    head, at, tail = url.rpartition("@")
    if not at:
        return _printable(_shown_rest(url))
    scheme, separator, userinfo = head.partition("://")
    prefix = f"{scheme.lower()}://" if separator and _SCHEME.fullmatch(scheme.lower()) else ""
    if not separator:
        userinfo = head
    if any(c in userinfo for c in "/?#"):
        return f"{prefix}***"
    return _printable(f"{prefix}***@{_shown_rest(tail)}")


def _for_driver(text: str) -> str:
    """Userinfo text percent-encoded so that no driver reads a delimiter into it; escapes already
    written are kept, a ``%`` that starts none becomes ``%25`` (as `unquote` reads it)."""
    return quote(_LONE_PERCENT.sub("%25", text), safe=_USERINFO_SAFE)


def _check_unicode(shown: str, **parts: str | None) -> None:
    """Refuse a part holding a lone surrogate (an undecodable byte): no driver can encode it."""
    for part, text in parts.items():
        try:
            (text or "").encode("utf-8")
        except UnicodeEncodeError:
            raise ConfigError(
                f"store URL {shown!r} has a character in its {part.replace('_', ' ')} that is "
                "not Unicode (an undecodable byte, as a command line can give): percent-encode "
                "it (%FF for the byte 0xFF)"
            ) from None


def _hosts(scheme: str, netloc: str) -> tuple[tuple[str | None, int | None], ...]:
    """The ``(host, port)`` pairs of a netloc (userinfo removed), several when comma-separated;
    `ValueError` for a bad port or an empty one of several."""
    specs = netloc.split(",")
    hosts: list[tuple[str | None, int | None]] = []
    for spec in specs:
        if len(specs) > 1 and not spec:
            raise ValueError("an empty host between commas")
        part = urlsplit(f"{scheme}://{spec}")
        hosts.append((part.hostname, part.port))
    return tuple(hosts)


@attrs.frozen(repr=False)
class StoreURL:
    """A parsed store URL. `str()` and `repr()` hide its credentials; `secret()` holds them.

    See the module's docstring for how a URL is split and shown."""

    scheme: str
    username: str | None
    password: str | None = attrs.field(eq=False)
    host: str | None
    port: int | None
    path: str
    """The path after the host, without the leading ``/`` (``sqlite:///x.db`` gives ``x.db``)."""
    query: tuple[tuple[str, str], ...]
    _userinfo: tuple[str, str | None] | None = attrs.field(alias="userinfo", eq=False)
    """User name and password as written (percent-encoded or not); None without an ``@``."""
    _rest: str = attrs.field(alias="rest", eq=False)
    """What follows the userinfo, as written: host, port, path, query, fragment."""
    hosts: tuple[tuple[str | None, int | None], ...] = ()
    """Every ``(host, port)`` of a URL that names several servers, comma-separated
    (``nats://h1:4222,h2:4222``); one for other URLs. `host` and `port` are the first."""

    @classmethod
    def parse(cls, url: str) -> StoreURL:
        """Split `url` (see the module's docstring); a `ConfigError` that never repeats a
        credential if it cannot be."""
        if not isinstance(url, str):
            raise ConfigError(f"store URL must be a string, got {type(url).__name__}")
        head, separator, rest = url.partition("://")
        if not separator:
            raise ConfigError(
                f"store URL {_unparsed(url)!r} has no scheme: write it like "
                "'sqlite:///anarchon.db' or 'redis://localhost:6379/0'"
            )
        scheme = head.lower()
        if not _SCHEME.fullmatch(scheme):
            named = f" {head!r}" if _SHOWABLE_SCHEME.fullmatch(head) else ""
            raise ConfigError(
                f"store URL {_unparsed(url)!r} has an invalid scheme{named}: a letter, then "
                "letters, digits, '+', '-' or '.', then '://' (like 'redis://')"
            )
        userinfo_text, at, rest = rest.rpartition("@")
        userinfo = _split_userinfo(userinfo_text) if at else None
        shown = _shown(scheme, userinfo, rest)
        if any(c in userinfo_text for c in "/?#"):
            raise ConfigError(
                f"store URL {_unparsed(url)!r} has a '/', '?' or '#' before its last '@', so it "
                "reads two ways (not shown: it may hold a password): percent-encode them in the "
                "password ('/' as %2F, '?' as %3F, '#' as %23, '@' as %40), or write an '@' in "
                "the path or query as %40"
            )
        try:
            parts = urlsplit(f"{scheme}://{rest}")
            hosts = _hosts(scheme, parts.netloc)
        except ValueError as exc:
            raise ConfigError(f"store URL {shown!r} is malformed: {exc}") from None
        host, port = hosts[0]
        user_text, password_text = userinfo or ("", None)
        _check_unicode(
            shown, user_name=user_text, password=password_text, host=parts.netloc, query=parts.query
        )
        try:
            query = tuple(parse_qsl(parts.query, keep_blank_values=True, strict_parsing=True))
        except ValueError:
            if parts.query:
                raise ConfigError(
                    f"store URL {shown!r} has a malformed query: write options as "
                    "?name=value&name=value"
                ) from None
            query = ()
        password = None if password_text is None else unquote(password_text)
        if password_text is not None:
            _remember(password_text, unquote(password_text), _for_driver(password_text))
        elif user_text and scheme in TOKEN_SCHEMES:
            _remember(user_text, unquote(user_text), _for_driver(user_text))
        _remember(*(value for name, value in query if _SECRET_NAME.search(name)))
        _remember(*_raw_secret_values(parts.query))
        return cls(
            scheme=scheme,
            username=unquote(user_text) if user_text else None,
            password=password,
            host=host,
            port=port,
            path=unquote(parts.path.removeprefix("/")),
            query=query,
            userinfo=userinfo,
            rest=rest,
            hosts=hosts,
        )

    def options(self) -> dict[str, str]:
        """The query parameters as options; a parameter given twice is a `ConfigError`."""
        result: dict[str, str] = {}
        for name, value in self.query:
            if name in result:
                raise ConfigError(f"option {name!r} appears twice in store URL {self}")
            result[name] = value
        return result

    def _driver_userinfo(self) -> str:
        if self._userinfo is None:
            return ""
        user, password = self._userinfo
        if password is None:
            return f"{_for_driver(user)}@"
        return f"{_for_driver(user)}:{_for_driver(password)}@"

    def secret(self) -> str:
        """The URL with its credentials, for drivers only, never for logs: as given, except that
        user name and password are percent-encoded, so that any driver splits it as `parse` did."""
        return f"{self.scheme}://{self._driver_userinfo()}{self._rest}"

    def without_query(self) -> str:
        """`secret()` without the query string: for drivers only."""
        before_fragment, hash_, fragment = self._rest.partition("#")
        base = before_fragment.partition("?")[0]
        return f"{self.scheme}://{self._driver_userinfo()}{base}{hash_}{fragment}"

    def __str__(self) -> str:
        return _shown(self.scheme, self._userinfo, self._rest)

    def __repr__(self) -> str:
        return f"StoreURL({str(self)!r})"


def _raw_secret_values(query: str) -> list[str]:
    """The values of secret parameters as written in `query` (before decoding)."""
    return [
        value
        for name, _, value in (piece.partition("=") for piece in query.split("&"))
        if _SECRET_NAME.search(unquote_plus(name))
    ]


def shown_url(url: str | StoreURL) -> str:
    """`url` as anarchon shows it, credentials hidden; never raises (a URL that cannot be parsed
    is shown as an error would show it)."""
    if isinstance(url, StoreURL):
        return str(url)
    try:
        return str(StoreURL.parse(url))
    except ConfigError:
        return _unparsed(url) if isinstance(url, str) else repr(url)
