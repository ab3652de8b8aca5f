"""A user without the privileges anarchon needs gets a `ConfigError` naming what is missing.

Each test makes a throwaway login role (roles are cluster-wide: a unique name, dropped after the
test with everything granted to it) and a schema of its own; the shared database's privileges are
never changed. The test server trusts local logins, so the role needs no password. PostgreSQL 15
grants nobody CREATE on the database or on ``public`` by default, so a fresh role can create
nothing.
"""

from __future__ import annotations

import pytest
from psycopg import sql

import anarchon
from anarchon import ClaimRequest, ConfigError, Outcome, RunStatus
from anarchon_postgres import PostgresStore, _schema
from anarchon_postgres._names import Names

from .conftest import T0, ManualClock, admin, as_role, url_with


async def create_as_owner(schema: str) -> None:
    store = PostgresStore.create(url_with(schema))
    await store.open()
    await store.close()


async def open_error(url: str) -> str:
    with pytest.raises(ConfigError) as info:
        await anarchon.connect(url)
    return str(info.value)


async def test_no_create_on_the_database_for_a_new_schema(schema: str, role: str) -> None:
    message = await open_error(as_role(role, schema))
    assert f"PostgreSQL user '{role}' cannot create its tables and claim function" in message
    assert f"it lacks CREATE on database test (schema {schema} does not exist yet)" in message
    assert "Open the store once as a user that has it" in message
    assert f'GRANT CREATE ON DATABASE "test" TO "{role}"' in message
    assert f'CREATE SCHEMA "{schema}" AUTHORIZATION "{role}"' in message


async def test_no_create_on_an_existing_schema(schema: str, role: str) -> None:
    admin(
        sql.SQL("CREATE SCHEMA {}").format(sql.Identifier(schema)),
        sql.SQL("GRANT USAGE ON SCHEMA {} TO {}").format(
            sql.Identifier(schema), sql.Identifier(role)
        ),
    )
    message = await open_error(as_role(role, schema))
    assert f"it lacks USAGE and CREATE on schema {schema}" in message
    assert f'GRANT USAGE, CREATE ON SCHEMA "{schema}" TO "{role}"' in message


async def test_no_usage_on_the_schema_of_existing_tables(schema: str, role: str) -> None:
    await create_as_owner(schema)
    message = await open_error(as_role(role, schema))
    assert f"PostgreSQL user '{role}' lacks privileges anarchon needs: USAGE on schema " in message
    assert f"SELECT, INSERT, UPDATE, DELETE on table {schema}.anarchon_runs;" in message
    assert f"SELECT, INSERT, UPDATE on table {schema}.anarchon_runs_jobs;" in message
    assert f"SELECT on table {schema}.anarchon_runs_schema;" in message
    assert f"SELECT, INSERT, UPDATE, DELETE on table {schema}.anarchon_runs_pauses;" in message
    assert f"SELECT, INSERT, DELETE on table {schema}.anarchon_runs_triggers;" in message
    assert f"SELECT, INSERT, UPDATE, DELETE on table {schema}.anarchon_runs_members." in message
    # EXECUTE on functions is granted to PUBLIC by default: not missing.
    assert "EXECUTE on function" not in message.split("run:")[0]
    assert f'GRANT USAGE ON SCHEMA "{schema}" TO "{role}"' in message


@pytest.mark.parametrize(
    ("revoke", "expected"),
    [
        ("REVOKE INSERT ON {s}.anarchon_runs FROM {r}", "INSERT on table {s}.anarchon_runs."),
        ("REVOKE UPDATE ON {s}.anarchon_runs_jobs FROM {r}", "UPDATE on table {s}.anarchon_runs_jobs."),
        ("REVOKE DELETE ON {s}.anarchon_runs FROM {r}", "DELETE on table {s}.anarchon_runs."),
        ("REVOKE SELECT ON {s}.anarchon_runs_schema FROM {r}", "SELECT on table {s}.anarchon_runs_schema."),
        ("REVOKE SELECT ON {s}.anarchon_runs_pauses FROM {r}", "SELECT on table {s}.anarchon_runs_pauses."),
        ("REVOKE INSERT ON {s}.anarchon_runs_triggers FROM {r}", "INSERT on table {s}.anarchon_runs_triggers."),
        (
            "REVOKE EXECUTE ON FUNCTION {s}.anarchon_runs_claim FROM PUBLIC, {r}",
            "EXECUTE on function {s}.anarchon_runs_claim.",
        ),
        (
            "REVOKE EXECUTE ON FUNCTION {s}.anarchon_runs_claim_many FROM PUBLIC, {r}",
            "EXECUTE on function {s}.anarchon_runs_claim_many.",
        ),
    ],
    ids=[
        "insert",
        "update-jobs",
        "delete",
        "select-version",
        "select-pauses",
        "insert-triggers",
        "execute",
        "execute-many",
    ],
)  # fmt: skip
async def test_one_missing_table_privilege_is_named(
    schema: str, role: str, revoke: str, expected: str
) -> None:
    await create_as_owner(schema)
    names = Names(schema, "anarchon_runs")
    admin(*_schema.grants(names, role))
    admin(revoke.format(s=f'"{schema}"', r=f'"{role}"'))
    message = await open_error(as_role(role, schema))
    assert f"lacks privileges anarchon needs: {expected.format(s=schema)} As the" in message


async def test_the_documented_grants_are_enough_for_every_call(schema: str, role: str) -> None:
    await create_as_owner(schema)
    admin(
        f'REVOKE EXECUTE ON FUNCTION "{schema}".anarchon_runs_claim FROM PUBLIC',
        f'REVOKE EXECUTE ON FUNCTION "{schema}".anarchon_runs_claim_many FROM PUBLIC',
    )
    admin(*_schema.grants(Names(schema, "anarchon_runs"), role))
    clock = ManualClock()
    store = PostgresStore.create(
        as_role(role, schema), clock=clock, history_limit=1, retention_margin_ms=1
    )
    await store.open()
    try:
        for status in (RunStatus.SUCCEEDED, RunStatus.FAILED):
            # The second claim's retention deletes the first run and raises the floor (L11).
            request = ClaimRequest(
                job="j", slot=clock.now, instance="a", lease_ms=1, max_late_ms=1000
            )
            claim = await store.claim(request)
            assert claim.won and claim.token is not None
            assert await store.renew("j", clock.now, claim.token, 1)
            assert await store.finish("j", clock.now, claim.token, status)
            clock.advance(10_000)
        many = await store.claim_many(
            [ClaimRequest(job=f"m{i}", slot=clock.now, instance="a") for i in range(3)]
        )
        assert all(c.won for c in many)
        check = await store.check(ClaimRequest(job="m0", slot=clock.now, instance="b"))
        assert check.outcome is Outcome.RUNNING
        assert await store.release("m0", clock.now, many[0].token or "")
        assert [r.slot for r in await store.history("j")] == [T0 + 10_000]
        # The member list (M1): announce (insert, then update and sweep), members, leave.
        first = await store.announce("a:1", 1_000, {"wins": 1})
        await store.announce("b:2", 1_000)
        clock.advance(5_000)
        again = await store.announce("a:1", 1_000)  # sweeps b:2, whose ttl ran out
        assert again.started_ms == again.seen_ms > first.started_ms
        assert [m.instance for m in await store.members()] == ["a:1"]
        assert await store.leave("a:1")
    finally:
        await store.close()  # fmt: skip
