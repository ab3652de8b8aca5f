"""The claim functions' bodies move forward only (see `anarchon_postgres._code`).

A body older than this release's is replaced when a store opens; a newer one (an instance of a
later release opened the schema first) is left alone, so a rolling upgrade never flips bodies back
and forth; a user that does not own the functions keeps the older body and is told who can
upgrade it. A test also pins the bodies of each `FUNCTIONS_VERSION`, so that a change to a body
cannot ship without a new version (which is what makes existing databases pick it up).
"""

from __future__ import annotations

import hashlib
import logging
import uuid

import psycopg
import pytest
from psycopg import sql

from anarchon import ClaimRequest
from anarchon_postgres import PostgresStore, _code, _schema
from anarchon_postgres._names import Names

from .conftest import POSTGRES_URL, admin, as_role, url_with

BODY_DIGESTS = {1: "1af6ea70", 2: "51d85f13", 3: "1a857810", 4: "00ef130d", 5: "6b11bbd0"}
"""sha256 (first 8 hex digits) of both functions' ``CREATE`` statements, per body version, for
`Names("s", "t")`. A failing digest test means a body changed: bump `FUNCTIONS_VERSION` and
record the new digest here (keep the old ones)."""


def body_digest() -> str:
    statements = _code.create_functions(Names("s", "t"))
    text = "\n".join(statement.as_string(None) for statement in statements)
    return hashlib.sha256(text.encode()).hexdigest()[:8]


def test_a_changed_body_has_a_new_version() -> None:
    version = _code.FUNCTIONS_VERSION
    recorded = BODY_DIGESTS.get(version)
    assert recorded == body_digest(), (
        f"the claim functions' bodies are not those of body version {version} "
        f"(digest {body_digest()}, recorded {recorded}): a changed body must reach existing "
        f"databases, so bump FUNCTIONS_VERSION to {version + 1} and record "
        f"BODY_DIGESTS[{version + 1}] = {body_digest()!r}"
    )


def catalog(schema: str, function: str) -> tuple[str, str | None]:
    """(body, comment) of `function` in `schema`."""
    with psycopg.connect(POSTGRES_URL, autocommit=True) as conn:
        row = conn.execute(
            "SELECT p.prosrc, obj_description(p.oid, 'pg_proc') FROM pg_catalog.pg_proc p "
            "JOIN pg_catalog.pg_namespace n ON n.oid = p.pronamespace "
            "WHERE n.nspname = %s AND p.proname = %s",
            (schema, function),
        ).fetchone()
    assert row is not None, f"no function {schema}.{function}"
    return str(row[0]), row[1]


def rewrite(schema: str, *, marker: str, version: int | None) -> None:
    """Both functions as another release would have left them: this release's bodies with
    `marker` (an SQL comment) in them, and the comment of body `version` (None: none, as before
    bodies had versions)."""
    names = Names(schema, "anarchon_runs")
    for (_, quoted, types), create in zip(
        _code.signatures(names), _code.create_functions(names), strict=True
    ):
        text = create.as_string(None).replace("BEGIN", f"BEGIN\n    -- {marker}", 1)
        comment = (
            sql.NULL
            if version is None
            else sql.Literal(f"anarchon-postgres claim function, body version {version}")
        )
        admin(
            sql.SQL(text),  # type: ignore[arg-type]
            sql.SQL("COMMENT ON FUNCTION {}({}) IS {}").format(quoted, sql.SQL(types), comment),
        )


async def open_and_claim(url: str) -> None:
    store = PostgresStore.create(url)
    await store.open()
    try:
        slot = await store.now_ms()
        job = "j" + uuid.uuid4().hex[:8]  # new each time: no overlap with the last call's run
        claim = await store.claim(ClaimRequest(job=job, slot=slot, instance="a"))
        assert claim.won, claim
        batch = [ClaimRequest(job=job + "-many", slot=slot, instance="a")]
        assert (await store.claim_many(batch))[0].won
    finally:
        await store.close()


FUNCTIONS = ("anarchon_runs_claim", "anarchon_runs_claim_many")


@pytest.mark.parametrize("older", [None, 0], ids=["no-comment", "version-0"])
async def test_an_older_body_is_replaced_on_open(schema: str, older: int | None) -> None:
    await open_and_claim(url_with(schema))
    rewrite(schema, marker="an older body", version=older)

    await open_and_claim(url_with(schema))

    for function in FUNCTIONS:
        body, comment = catalog(schema, function)
        assert "an older body" not in body
        assert (
            comment == f"anarchon-postgres claim function, body version {_code.FUNCTIONS_VERSION}"
        )


async def test_a_newer_body_is_kept(schema: str) -> None:
    """An instance of this release that opens after a newer one leaves the newer bodies."""
    await open_and_claim(url_with(schema))
    newer = _code.FUNCTIONS_VERSION + 1
    rewrite(schema, marker="a newer release's body", version=newer)

    await open_and_claim(url_with(schema))

    for function in FUNCTIONS:
        body, comment = catalog(schema, function)
        assert "a newer release's body" in body
        assert comment == f"anarchon-postgres claim function, body version {newer}"


async def test_a_user_that_does_not_own_the_functions_keeps_older_bodies_and_is_told(
    schema: str, role: str, caplog: pytest.LogCaptureFixture
) -> None:
    await open_and_claim(url_with(schema))
    rewrite(schema, marker="an older body", version=None)
    admin(*_schema.grants(Names(schema, "anarchon_runs"), role))

    with caplog.at_level(logging.WARNING, logger="anarchon.postgres"):
        await open_and_claim(as_role(role, schema))

    for function in FUNCTIONS:
        assert "an older body" in catalog(schema, function)[0]
    warnings = [r.getMessage() for r in caplog.records if r.levelno == logging.WARNING]
    assert len(warnings) == 1, warnings
    assert "anarchon_runs_claim, anarchon_runs_claim_many" in warnings[0]
    assert f"body version 0, 0, older than this release's {_code.FUNCTIONS_VERSION}" in warnings[0]
    assert "only their owner can replace them" in warnings[0]

    # The owner's next open upgrades them.
    await open_and_claim(url_with(schema))
    for function in FUNCTIONS:
        assert "an older body" not in catalog(schema, function)[0]
