"""Options of `postgresql://`: ours are known by name; every other URL parameter goes to libpq.

anarchon's options (`table`, `schema`, the pool sizes, `statement_timeout_ms` and the common ones)
are the fields of `PostgresOptions`. Any other query parameter or keyword (``sslmode``,
``connect_timeout``, ``application_name``, ``target_session_attrs`` ...) must be a libpq connection
parameter and is passed to libpq untouched; a name that is neither is a `ConfigError` listing both.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from typing import Any

import attrs
from cattrs.gen import make_dict_structure_fn
from psycopg import pq

from anarchon import ConfigError, DurationMsOrZero, StoreOptions
from anarchon.backend import converter

from ._durability import DURABILITY

__all__ = ["IDENTIFIER_RULE", "MAX_POOL_SIZE", "PostgresOptions", "check_identifier"]

MAX_POOL_SIZE = 1000
MAX_STATEMENT_TIMEOUT_MS = 3_600_000
IDENTIFIER_RULE = (
    "1 to {max} ASCII letters, digits or '_', starting with a letter or '_', not starting with "
    "'pg_' (it becomes a quoted PostgreSQL identifier)"
)
_IDENTIFIER = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")
_TABLE_MAX = 48
"""Room for the suffixes anarchon adds (``_jobs``, ``_schema``, ``_claim_many``) within 63 bytes."""
_SCHEMA_MAX = 63


def check_identifier(value: object, *, what: str, max_length: int) -> str:
    """Return `value` if it is a safe table or schema name, else raise `ConfigError` with the rule."""
    rule = IDENTIFIER_RULE.format(max=max_length)
    if not isinstance(value, str):
        raise ConfigError(f"{what} must be a string, got {type(value).__name__}: use {rule}")
    if not _IDENTIFIER.fullmatch(value) or len(value) > max_length:
        problem = f"is {len(value)} characters long" if len(value) > max_length else "is invalid"
        raise ConfigError(f"{what} {value!r} {problem}: use {rule}")
    if value.lower().startswith("pg_"):
        raise ConfigError(f"{what} {value!r} starts with 'pg_', reserved by PostgreSQL: use {rule}")
    return value


def _check_table(_: object, attribute: attrs.Attribute[str], value: object) -> None:
    check_identifier(value, what="table", max_length=_TABLE_MAX)


def _check_schema(_: object, attribute: attrs.Attribute[str], value: object) -> None:
    check_identifier(value, what="schema", max_length=_SCHEMA_MAX)


def _check_pool(_: object, attribute: attrs.Attribute[int], value: object) -> None:
    if isinstance(value, bool) or not isinstance(value, int) or not 0 <= value <= MAX_POOL_SIZE:
        raise ConfigError(
            f"{attribute.name} must be an int from 0 to {MAX_POOL_SIZE}, got {value!r}"
        )


def _check_timeout(_: object, attribute: attrs.Attribute[DurationMsOrZero], value: object) -> None:
    if (
        isinstance(value, bool)
        or not isinstance(value, int)
        or not 0 <= value <= MAX_STATEMENT_TIMEOUT_MS
    ):
        raise ConfigError(
            f"statement_timeout_ms must be from 0 (no limit) to {MAX_STATEMENT_TIMEOUT_MS} ms, "
            f"got {value!r}: write for example statement_timeout_ms=30s"
        )


def _check_durability(_: object, attribute: attrs.Attribute[str], value: object) -> None:
    if value not in DURABILITY:
        raise ConfigError(
            f"durability must be one of {', '.join(DURABILITY)}, got {value!r}: replicated "
            "refuses to open unless commits wait for a synchronous standby"
        )


def _libpq_keywords() -> frozenset[str]:
    return frozenset(d.keyword.decode() for d in pq.Conninfo.get_defaults())


@attrs.frozen(kw_only=True)
class PostgresOptions(StoreOptions):
    """Options of the PostgreSQL store (URL query parameters or keyword arguments of `connect`)."""

    table: str = attrs.field(default="anarchon_runs", validator=_check_table)
    """The runs table; anarchon also creates ``<table>_jobs``, ``<table>_schema`` and the
    functions ``<table>_claim`` and ``<table>_claim_many`` next to it."""
    schema: str = attrs.field(default="public", validator=_check_schema)
    """The schema holding the tables; created by `open` if it does not exist (never by
    `open_read_only`)."""
    pool_min_size: int = attrs.field(default=1, validator=_check_pool)
    """Connections the pool keeps open."""
    pool_max_size: int = attrs.field(default=5, validator=_check_pool)
    """Most connections the pool opens at once."""
    statement_timeout_ms: DurationMsOrZero = attrs.field(
        default=DurationMsOrZero(30_000), validator=_check_timeout
    )
    """Longest a statement may run, and a claim may wait for its job's row lock; 0: no limit."""
    durability: str = attrs.field(default="local", validator=_check_durability)
    """``local``: whatever the server's replication does. ``replicated``: `open` refuses (a
    `ConfigError`) unless commits wait for a synchronous standby (``synchronous_standby_names``
    set, ``synchronous_commit`` on or remote_apply), so a failover to it never forgets a won
    claim."""
    libpq: tuple[tuple[str, str], ...] = ()
    """Every other parameter, passed to libpq (``sslmode``, ``connect_timeout`` ...)."""

    def __attrs_post_init__(self) -> None:
        if self.pool_max_size < max(self.pool_min_size, 1):
            raise ConfigError(
                f"pool_max_size ({self.pool_max_size}) must be at least 1 and at least "
                f"pool_min_size ({self.pool_min_size})"
            )
        known = _libpq_keywords()
        for name, value in self.libpq:
            if name not in known:
                ours = sorted(a.name for a in attrs.fields(PostgresOptions) if a.name != "libpq")
                raise ConfigError(
                    f"unknown option {name} for postgresql://; valid options: "
                    + ", ".join(ours)
                    + "; or any libpq connection parameter ("
                    + ", ".join(sorted(known))
                    + ")"
                )
            if not isinstance(value, str):
                raise ConfigError(f"libpq parameter {name} must be a string, got {value!r}")


_structure_fields = make_dict_structure_fn(
    PostgresOptions, converter, _cattrs_forbid_extra_keys=True
)


def _structure(data: Mapping[str, Any], cls: type[PostgresOptions]) -> PostgresOptions:
    if not isinstance(data, Mapping):
        raise ConfigError(f"options must be a mapping, got {type(data).__name__}")
    ours = {a.name for a in attrs.fields(PostgresOptions)} - {"libpq"}
    fields = {k: v for k, v in data.items() if k in ours}
    passed = {k: v for k, v in data.items() if k not in ours}
    if "libpq" in data:
        raise ConfigError("option libpq is internal: pass libpq parameters by their own names")
    fields["libpq"] = tuple(
        (k, v if isinstance(v, str) else str(v)) for k, v in sorted(passed.items())
    )
    return _structure_fields(fields, cls)


converter.register_structure_hook(PostgresOptions, _structure)
