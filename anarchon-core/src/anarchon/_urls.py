"""Store URLs, parsed once and never shown with their password."""

from __future__ import annotations

import re
from urllib.parse import parse_qsl, unquote, urlsplit, urlunsplit

import attrs

from ._errors import ConfigError

__all__ = ["StoreURL", "redact"]

_SCHEME = re.compile(r"[a-z][a-z0-9+.-]*")
_SECRET_IN_URL = re.compile(r"(?P<head>[a-zA-Z][a-zA-Z0-9+.-]*://[^:/?#@\s]*:)[^@/\s]*(?P<at>@)")


def redact(text: str) -> str:
    """Replace every ``user:password@`` in `text` with ``user:***@``."""
    return _SECRET_IN_URL.sub(r"\g<head>***\g<at>", text)


@attrs.frozen(repr=False)
class StoreURL:
    """A parsed store URL. `str()` and `repr()` hide the password; `secret()` returns it whole."""

    scheme: str
    username: str | None
    password: str | None = attrs.field(eq=False)
    host: str | None
    port: int | None
    path: str
    """The path after the host, without the leading ``/`` (``sqlite:///x.db`` gives ``x.db``)."""
    query: tuple[tuple[str, str], ...]
    _raw: str = attrs.field(alias="raw", eq=False)

    @classmethod
    def parse(cls, url: str) -> StoreURL:
        if not isinstance(url, str):
            raise ConfigError(f"store URL must be a string, got {type(url).__name__}")
        shown = redact(url)
        if "://" not in url:
            raise ConfigError(
                f"store URL {shown!r} has no scheme: write it like 'sqlite:///anarchon.db' or "
                "'redis://localhost:6379/0'"
            )
        scheme = url.split("://", 1)[0].lower()
        if not _SCHEME.fullmatch(scheme):
            raise ConfigError(f"store URL {shown!r} has an invalid scheme {scheme!r}")
        try:
            parts = urlsplit(url)
            port = parts.port
        except ValueError as exc:
            raise ConfigError(f"store URL {shown!r} is malformed: {redact(str(exc))}") from None
        try:
            query = tuple(parse_qsl(parts.query, keep_blank_values=True, strict_parsing=True))
        except ValueError:
            if parts.query:
                raise ConfigError(
                    f"store URL {shown!r} has a malformed query: write options as ?name=value&name=value"
                ) from None
            query = ()
        path = unquote(parts.path.removeprefix("/"))
        return cls(
            scheme=scheme,
            username=unquote(parts.username) if parts.username else None,
            password=unquote(parts.password) if parts.password is not None else None,
            host=parts.hostname,
            port=port,
            path=path,
            query=query,
            raw=url,
        )

    def options(self) -> dict[str, str]:
        """The query parameters as options; a parameter given twice is a `ConfigError`."""
        result: dict[str, str] = {}
        for name, value in self.query:
            if name in result:
                raise ConfigError(f"option {name!r} appears twice in store URL {self}")
            result[name] = value
        return result

    def secret(self) -> str:
        """The URL as given, password included: for drivers only, never for logs."""
        return self._raw

    def without_query(self) -> str:
        """The URL without its query string, password included: for drivers only."""
        parts = urlsplit(self._raw)
        return urlunsplit((parts.scheme, parts.netloc, parts.path, "", parts.fragment))

    def __str__(self) -> str:
        return redact(self._raw)

    def __repr__(self) -> str:
        return f"StoreURL({str(self)!r})"
