"""From the store URL to libpq: the connection string, and the settings every connection gets.

Nothing here relies on session state, so the store works through PgBouncer in transaction mode:
connections are autocommit (one statement, one transaction), ``prepare_threshold=None`` (no named
server-side prepared statements), no ``SET``, no session advisory locks, no ``LISTEN``.
"""

from __future__ import annotations

from typing import Any

import psycopg
from psycopg.conninfo import conninfo_to_dict, make_conninfo

from anarchon import ConfigError, StoreURL, redact

from ._errors import shown_url
from ._options import PostgresOptions

__all__ = ["CONNECT_TIMEOUT_S", "connection_kwargs", "libpq_conninfo"]

CONNECT_TIMEOUT_S = 10
"""libpq ``connect_timeout`` when the URL sets none: an unreachable server fails in bounded time."""


def libpq_conninfo(url: StoreURL, options: PostgresOptions) -> tuple[str, tuple[str, ...]]:
    """The libpq connection string for `url` without anarchon's options, and the secrets in it
    (to scrub from messages)."""
    params: dict[str, Any] = dict(options.libpq)
    params.setdefault("connect_timeout", str(CONNECT_TIMEOUT_S))
    params.setdefault("application_name", "anarchon")
    if options.statement_timeout_ms:
        # The lock timeout too: the claim functions set it per transaction only when the
        # connection lacks it (through PgBouncer, which does not pass these settings on).
        timeout = options.statement_timeout_ms
        setting = f"-c statement_timeout={timeout} -c lock_timeout={timeout}"
        params["options"] = f"{params['options']} {setting}" if "options" in params else setting
    try:
        conninfo = make_conninfo(url.without_query(), **params)
        parsed = conninfo_to_dict(conninfo)
    except psycopg.ProgrammingError as exc:
        raise ConfigError(
            f"PostgreSQL URL {shown_url(url)} is invalid: {redact(str(exc))}"
        ) from None
    secrets = tuple(
        str(parsed[k]) for k in ("password", "sslpassword") if parsed.get(k) not in (None, "")
    )
    return conninfo, secrets


def connection_kwargs() -> dict[str, Any]:
    """Keyword arguments of every connection (pooled or not)."""
    return {"autocommit": True, "prepare_threshold": None}
