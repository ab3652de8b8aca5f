"""Turn psycopg's exceptions into anarchon's errors, naming the server but never the password."""

from __future__ import annotations

import re
from urllib.parse import parse_qsl, urlencode

import psycopg
from psycopg import errors
from psycopg_pool import PoolTimeout

from anarchon import AnarchonError, ConfigError, StoreCorrupt, StoreUnavailable, StoreURL

__all__ = ["RETRYABLE", "shown_url", "translate"]

REFUSED_LOGIN = re.compile(
    r"authentication failed for user|no pg_hba\.conf entry|no password supplied"
    r'|(role|database) "[^"]*" does not exist'
)
"""What libpq says (with no SQLSTATE) when the server refuses the login itself: a wrong password,
an unknown role or database, pg_hba.conf. Trying again cannot help."""

RETRYABLE = (errors.SerializationFailure, errors.DeadlockDetected, errors.UniqueViolation)
"""Raised when the database's default isolation is REPEATABLE READ or SERIALIZABLE and two claims
of one job meet; the statement rolled back, so it is resent as is."""


def shown_url(url: StoreURL) -> str:
    """The URL for messages: ``user:***@`` and any ``password=`` parameter hidden."""
    text = str(url)
    if "?" not in text:
        return text
    base, query = text.split("?", 1)
    pairs = [
        (k, "***" if k in ("password", "sslpassword") else v)
        for k, v in parse_qsl(query, keep_blank_values=True)
    ]
    return f"{base}?{urlencode(pairs, safe='*')}"


def scrub(text: str, secrets: tuple[str, ...]) -> str:
    """`text` with every secret replaced by ``***``."""
    for secret in secrets:
        if secret:
            text = text.replace(secret, "***")
    return text


def translate(
    exc: BaseException,
    where: str,
    secrets: tuple[str, ...],
    *,
    tables: str,
    read_only: bool = False,
) -> AnarchonError:
    """The anarchon error for `exc`, raised by an operation on the server at `where` (by a
    store opened with `open_read_only` if `read_only`)."""
    detail = scrub(" ".join(str(exc).split()), secrets)
    if read_only and isinstance(exc, errors.InsufficientPrivilege):
        return ConfigError(
            f"PostgreSQL at {where}: permission denied ({detail}); to read the store, the user "
            f"needs USAGE on the schema and SELECT on {tables}"
        )
    if isinstance(exc, PoolTimeout):
        return StoreUnavailable(
            f"PostgreSQL at {where}: no connection within the pool timeout ({detail}); the server "
            "may be down or every pooled connection busy; the claim may be resent with the same token"
        )
    if isinstance(exc, errors.InsufficientPrivilege):
        return ConfigError(
            f"PostgreSQL at {where}: permission denied ({detail}); the user needs USAGE on the "
            f"schema, SELECT, INSERT, UPDATE (and DELETE on the runs table) on {tables} and "
            "EXECUTE on the claim function; to create them, CREATE on the schema (or on the "
            "database if the schema does not exist yet)"
        )
    if isinstance(exc, errors.ReadOnlySqlTransaction):
        return StoreUnavailable(
            f"PostgreSQL at {where} is read-only (a hot standby, or a session with "
            "default_transaction_read_only): point the URL at the primary, or with several hosts "
            "add target_session_attrs=read-write; the claim may be resent with the same token"
        )
    if isinstance(exc, (errors.QueryCanceled, errors.LockNotAvailable)):
        return StoreUnavailable(
            f"PostgreSQL at {where}: the statement timed out ({detail}); another transaction may "
            "hold the job's row lock; the claim may be resent with the same token, or raise "
            "statement_timeout_ms"
        )
    if isinstance(
        exc,
        (errors.UndefinedTable, errors.UndefinedColumn, errors.UndefinedFunction, errors.DataError),
    ):
        return StoreCorrupt(
            f"PostgreSQL at {where}: {tables} no longer look like anarchon's ({detail}); they "
            "were changed while the store was open: reopen it to have them checked"
        )
    if isinstance(exc, psycopg.OperationalError) and REFUSED_LOGIN.search(detail):
        return ConfigError(
            f"PostgreSQL at {where} refused the login ({detail}); put a user, password and "
            "database the server accepts in the URL (postgresql://user:password@host:5432/db)"
        )
    if isinstance(exc, (psycopg.OperationalError, psycopg.InterfaceError, OSError)):
        return StoreUnavailable(
            f"PostgreSQL at {where} cannot be reached ({detail}); check host, port, user, "
            "password (not shown), database and sslmode; a claim may be resent with the same token"
        )
    return StoreUnavailable(f"PostgreSQL at {where} failed ({type(exc).__name__}: {detail})")
