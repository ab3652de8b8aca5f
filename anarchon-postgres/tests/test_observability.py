"""`jobs()`, ``anarchon status --json`` against the live server, and logs without the password."""

from __future__ import annotations

import asyncio
import json
import logging
import os
from urllib.parse import urlsplit, urlunsplit

import pytest
from click.testing import CliRunner

from anarchon import ClaimRequest, RunStatus, Scheduler, SupportsJobList
from anarchon.cli import cli
from anarchon_postgres import PostgresStore

POSTGRES_URL = os.environ.get(
    "ANARCHON_TEST_POSTGRES_URL", "postgresql://postgres@127.0.0.1:5432/test"
)


def url_with(schema: str, **options: object) -> str:
    query = "&".join(f"{k}={v}" for k, v in {"schema": schema, **options}.items())
    return f"{POSTGRES_URL}{'&' if '?' in POSTGRES_URL else '?'}{query}"


def with_password(url: str, password: str) -> str:
    """The test server trusts local users, so any password connects: enough to check that it
    never shows."""
    parts = urlsplit(url)
    user = parts.username or "postgres"
    host = parts.hostname or "127.0.0.1"
    netloc = f"{user}:{password}@{host}" + (f":{parts.port}" if parts.port else "")
    return urlunsplit(parts._replace(netloc=netloc))


async def test_postgres_lists_its_jobs(pg_store: PostgresStore, schema: str) -> None:
    assert isinstance(pg_store, SupportsJobList)
    assert await pg_store.jobs() == []
    for job in ("beta", "alpha"):
        await pg_store.claim(ClaimRequest(job=job, slot=1000, instance="x", max_late_ms=10**13))
    assert await pg_store.jobs() == ["alpha", "beta"]
    other = PostgresStore.create(url_with(schema, prefix="other"))
    await other.open()
    try:
        assert await other.jobs() == []
    finally:
        await other.close()


async def test_status_json_against_live_postgres(pg_store: PostgresStore, schema: str) -> None:
    for slot in (1000, 2000):
        request = ClaimRequest(job="nightly", slot=slot, instance="web-2", max_late_ms=10**13)
        assert (await pg_store.claim(request)).won
        if slot == 1000:
            await pg_store.finish("nightly", slot, request.token, RunStatus.SUCCEEDED)
    url = with_password(url_with(schema), "hunter2")
    result = await asyncio.to_thread(
        CliRunner().invoke, cli, ["status", url, "--json"], prog_name="anarchon"
    )
    assert result.exit_code == 0, result.output
    assert "hunter2" not in result.output
    data = json.loads(result.output)
    (job,) = data["jobs"]
    assert job["job"] == "nightly"
    assert job["counts"] == {"running": 1, "succeeded": 1}
    latest = job["latest"][0]
    assert (latest["slot_ms"], latest["status"], latest["winner"]) == (2000, "running", "web-2")
    assert latest["lease_remaining_ms"] > 0


async def test_no_log_record_carries_the_password(
    schema: str, caplog: pytest.LogCaptureFixture
) -> None:
    url = with_password(url_with(schema), "hunter2")
    s = Scheduler(url, instance="a", environ={})
    ran = asyncio.Event()

    @s.job("* * * * * *", name="tick", max_late="800ms")
    def tick() -> None:
        ran.set()

    caplog.set_level(logging.DEBUG, logger="anarchon")
    async with s:
        await asyncio.wait_for(ran.wait(), 5)
        s.store_health.failed("claim", ConnectionError(f"cannot reach {url}"))
    assert caplog.records
    for record in caplog.records:
        assert "hunter2" not in record.getMessage()
        assert "hunter2" not in json.dumps({k: str(v) for k, v in vars(record).items()})
    assert "hunter2" not in json.dumps(s.health().to_dict())
