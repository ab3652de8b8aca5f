"""Code in the database: the claim functions, which of them exist at which version, and bringing
them up to this release's.

The functions are code, not data, so anarchon-postgres replaces them freely, with three rules:

* **A signature is a protocol.** ``<table>_claim(text, text)`` takes the packed request of
  `_function.REQUEST_FIELDS` and a skip reason, and answers `_plpgsql.ANSWER_FIELDS`; the batch
  function likewise. A release that changes what a function takes or answers gives it a new
  signature, which is another function: opening creates it next to the old one, which instances
  of the older release keep calling during a rolling upgrade (``tests/test_upgrade.py``). (The
  ledger's release did so: ``<table>_claim(text)`` answered late and overlap without writing.)
* **A body has a version.** A release that changes a body and keeps the signature (a faster
  plan, a fix) bumps `FUNCTIONS_VERSION`; each function's ``COMMENT`` records the version of its
  body. Opening replaces a body older than this release's (``CREATE OR REPLACE`` keeps its owner
  and grants), under the schema's advisory lock, and never one that is newer: during a rolling
  upgrade an instance of the older release leaves the newer bodies alone, so bodies only move
  forward instead of flipping with every restart. A function without the comment predates
  versioning: version 0.
* **Only the owner replaces.** A user that may execute the functions but does not own them (an
  application role next to a migration role) keeps the older body, which still speaks the same
  protocol, and the store logs a warning saying who can upgrade it.
"""

from __future__ import annotations

import logging
import re

import attrs
from psycopg import AsyncConnection, sql

from ._function import ARGUMENT_TYPES, create_function
from ._many_function import MANY_ARGUMENT_TYPES, create_many_function
from ._names import Names

__all__ = [
    "FUNCTIONS_VERSION",
    "PAUSE_BODY_VERSION",
    "Function",
    "create_functions",
    "functions_found",
    "install",
    "keep_pauses",
    "signatures",
    "warn_not_owned",
]

log = logging.getLogger("anarchon.postgres")

FUNCTIONS_VERSION = 5
"""The version of this release's function bodies. Bump it whenever a body changes (a test
compares the bodies with the digest recorded for each version)."""
PAUSE_BODY_VERSION = 4
"""The first body version whose claims keep P1 (read the job's pause)."""

_COMMENT = "anarchon-postgres claim function, body version {}"
_VERSION_IN_COMMENT = re.compile(r"body version (\d+)$")


def signatures(names: Names) -> list[tuple[str, sql.Identifier, str]]:
    """(name, quoted name, argument types) of each claim function, in creation order (the batch
    function calls the claim function)."""
    return [
        (names.function, names.claim, ARGUMENT_TYPES),
        (names.batch_function, names.claim_many, MANY_ARGUMENT_TYPES),
    ]


def create_functions(names: Names) -> list[sql.Composed]:
    """Both functions' ``CREATE OR REPLACE FUNCTION``, in creation order."""
    return [create_function(names), create_many_function(names)]


@attrs.frozen
class Function:
    """One claim function as the catalog has it."""

    name: str
    exists: bool
    version: int
    """Its body's version (`FUNCTIONS_VERSION` of the release that wrote it; 0: no comment)."""
    owned: bool
    """The current user owns it (or is a member of its owner), so it may replace it."""

    @property
    def current(self) -> bool:
        """Nothing to do: this release's body, or a newer release's."""
        return self.exists and self.version >= FUNCTIONS_VERSION


_FOUND = """
SELECT p.oid IS NOT NULL, obj_description(p.oid, 'pg_proc'),
       coalesce(pg_has_role(p.proowner, 'MEMBER'), false)
FROM unnest(%s::text[]) WITH ORDINALITY AS s(signature, k)
LEFT JOIN pg_catalog.pg_proc p ON p.oid = to_regprocedure(s.signature)
ORDER BY s.k
"""


async def functions_found(
    conn: AsyncConnection[tuple[object, ...]], names: Names
) -> list[Function]:
    """Each claim function (in `signatures` order) as the catalog has it: one query."""
    wanted = signatures(names)
    cur = await conn.execute(
        _FOUND,
        ([sql.SQL("{}({})").format(q, sql.SQL(types)).as_string(conn) for _, q, types in wanted],),
    )
    found = []
    for (name, _, _), (exists, comment, owned) in zip(wanted, await cur.fetchall(), strict=True):
        match = _VERSION_IN_COMMENT.search(comment) if isinstance(comment, str) else None
        found.append(
            Function(
                name=name,
                exists=bool(exists),
                version=int(match.group(1)) if match else 0,
                owned=bool(owned),
            )
        )
    return found


async def install(
    conn: AsyncConnection[tuple[object, ...]],
    names: Names,
    found: list[Function] | None,
) -> None:
    """Create the functions that are missing and replace those older than this release's and
    owned by the current user; `found` None: create or replace both (a new or migrated schema).
    Runs in the caller's transaction, under the schema's advisory lock."""
    comment = sql.Literal(_COMMENT.format(FUNCTIONS_VERSION))
    for i, ((_, quoted, types), create) in enumerate(
        zip(signatures(names), create_functions(names), strict=True)
    ):
        function = None if found is None else found[i]
        if function is not None and (function.current or (function.exists and not function.owned)):
            continue
        await conn.execute(create)
        await conn.execute(
            sql.SQL("COMMENT ON FUNCTION {}({}) IS {}").format(quoted, sql.SQL(types), comment)
        )


def keep_pauses(found: list[Function] | None) -> bool:
    """Whether the claim functions keep P1 once `install` has run on `found` (None: both were
    created or replaced): an older body stays only where the current user does not own it."""
    return found is None or all(
        not f.exists or f.owned or f.version >= PAUSE_BODY_VERSION for f in found
    )


def warn_not_owned(found: list[Function], names: Names) -> None:
    """Log that older bodies stay because the current user does not own them."""
    older = [f for f in found if f.exists and not f.current and not f.owned]
    if older:
        log.warning(
            "PostgreSQL claim function(s) %s in schema %s have body version %s, older than this "
            "release's %d; they still work, but only their owner can replace them: open the "
            "store once as that user (a migration role, say) to upgrade them",
            ", ".join(f.name for f in older),
            names.schema,
            ", ".join(str(f.version) for f in older),
            FUNCTIONS_VERSION,
        )
