"""Failover to a promoted replica (issue #24): a multi-host URL with
``target_session_attrs=read-write`` follows the primary, a claim in flight when the primary dies
is never answered `won` wrongly (C3) and, sent again with the same token, gets the right answer
(C2); ``durability=replicated`` refuses servers whose commits do not wait for a standby.

The pair tests start their own primary and replica (`replicated_pair`) on free loopback ports."""

from __future__ import annotations

import asyncio
import subprocess
import sys
import time
import uuid
from collections.abc import Iterator
from typing import Any

import psycopg
import pytest
from psycopg import sql

from anarchon import ClaimRequest, ConfigError, Outcome, Overlap, StoreUnavailable
from anarchon_postgres import PostgresStore
from anarchon_test_support import eventually

from .conftest import POSTGRES_URL, url_with
from .private_server import free_port
from .replicated_pair import replicated_pair

SECRET = "failover-s3cret"


def _request(job: str, slot: int, instance: str = "a", token: str | None = None) -> ClaimRequest:
    fields: dict[str, Any] = {"token": token} if token else {}
    return ClaimRequest(
        job=job,
        slot=slot,
        instance=instance,
        lease_ms=600_000,
        max_late_ms=86_400_000,
        overlap=Overlap.ALLOW,
        **fields,
    )


async def test_durability_replicated_refuses_a_server_whose_commits_wait_for_no_standby(
    schema: str,
) -> None:
    store = PostgresStore.create(url_with(schema, durability="replicated"))
    with pytest.raises(ConfigError, match="synchronous_standby_names is empty") as info:
        await store.open()
    assert "durability=replicated" in str(info.value)
    local = PostgresStore.create(url_with(schema))  # the default opens the same server
    await local.open()
    await local.close()


def test_durability_is_local_or_replicated() -> None:
    with pytest.raises(ConfigError, match="durability must be one of local, replicated"):
        PostgresStore.create("postgresql://h/db?durability=sync")


async def test_a_host_list_that_nobody_answers_is_named_without_its_password() -> None:
    ports = free_port(), free_port()
    url = (
        f"postgresql://app:{SECRET}@127.0.0.1:{ports[0]},127.0.0.1:{ports[1]}/db"
        "?target_session_attrs=read-write&connect_timeout=2"
    )
    store = PostgresStore.create(url)
    with pytest.raises(StoreUnavailable) as info:
        await store.open()
    text = str(info.value)
    assert f"127.0.0.1:{ports[0]},127.0.0.1:{ports[1]}/db" in text
    assert SECRET not in text and SECRET not in repr(store)


@pytest.fixture(scope="module")
def sync_pair() -> Iterator[Any]:
    """A primary with one synchronous replica (``synchronous_commit = on``)."""
    with replicated_pair("on") as pair:
        yield pair


def _waiting_on_a_lock(url: str) -> bool:
    with psycopg.connect(url, autocommit=True) as conn:
        row = conn.execute(
            "SELECT count(*) FROM pg_stat_activity WHERE wait_event_type = 'Lock'"
        ).fetchone()
    return bool(row and row[0])


@pytest.mark.slow
async def test_a_claim_in_flight_when_the_primary_dies_is_decided_on_the_promoted_replica(
    sync_pair: Any,
) -> None:
    schema = "t_" + uuid.uuid4().hex[:12]
    url = url_with(schema, sync_pair.url, durability="replicated", connect_timeout=3)
    store = PostgresStore.create(url, pool_min_size=2)
    await store.open()
    job, slot = "failover", int(time.time() * 1000)
    try:
        before = await store.claim(_request(job, slot))
        assert before.outcome is Outcome.WON
        # Hold the job's row lock on the primary, so the next claim is in flight when it dies.
        holder = await psycopg.AsyncConnection.connect(sync_pair.url)
        jobs = sql.Identifier(schema, "anarchon_runs_jobs")
        await holder.execute(
            sql.SQL("SELECT 1 FROM {} WHERE job = %s FOR UPDATE").format(jobs), (job,)
        )
        in_flight = _request(job, slot + 1)
        pending = asyncio.ensure_future(store.claim(in_flight))
        await eventually(
            lambda: _waiting_on_a_lock(sync_pair.url), what="the claim waits on the row lock"
        )
        await asyncio.to_thread(sync_pair.fail_over)
        try:
            first = (await pending).outcome  # resent by the pool on a new connection
        except StoreUnavailable:
            first = Outcome.UNKNOWN  # or failed while no primary was up: resent below
        assert first in (Outcome.WON, Outcome.UNKNOWN)
        await holder.close()
        again = await store.claim(in_flight)  # the same token, on the promoted replica
        assert (again.outcome, again.token) == (Outcome.WON, in_flight.token)
        rival = await store.claim(_request(job, slot + 1, "b"))
        assert (rival.outcome, rival.token) == (Outcome.RUNNING, in_flight.token)
        # The claim acknowledged before the failover survived it (a synchronous standby).
        kept = await store.claim(_request(job, slot, "b"))
        assert (kept.outcome, kept.token) == (Outcome.RUNNING, before.token)
    finally:
        await store.close()


async def test_durability_replicated_opens_on_a_synchronous_pair_but_not_with_local_commits(
    sync_pair: Any,
) -> None:
    schema = "t_" + uuid.uuid4().hex[:12]
    url = url_with(schema, sync_pair.url, durability="replicated")
    store = PostgresStore.create(url)
    await store.open()
    await store.close()
    # A synchronous commit waits for the standby's flush, not its replay: wait until the tables
    # the primary created are visible there, so that the standby's open finds them.
    standby_url = f"postgresql://postgres@127.0.0.1:{sync_pair.standby.port}/postgres"

    def replayed() -> bool:
        with psycopg.connect(standby_url, autocommit=True) as conn:
            found = conn.execute("SELECT count(*) FROM pg_tables WHERE schemaname = %s", (schema,))
            row = found.fetchone()
            return row is not None and row[0] > 0

    await eventually(replayed, 10, "the standby to replay the primary's tables")
    # The standby alone (no target_session_attrs): the claim is refused, and the error says how
    # to reach the primary.
    standby = PostgresStore.create(url_with(schema, standby_url))
    await standby.open()
    try:
        with pytest.raises(StoreUnavailable, match=r"read-only.*target_session_attrs=read-write"):
            await standby.claim(_request("on-standby", int(time.time() * 1000)))
    finally:
        await standby.close()
    local = PostgresStore.create(url, options="-c synchronous_commit=local")
    with pytest.raises(ConfigError, match="synchronous_commit on or remote_apply"):
        await local.open()


@pytest.mark.processes
async def test_a_host_list_skips_a_dead_host_for_the_store_and_for_anarchon_status(
    schema: str,
) -> None:
    """The first host refuses connections; libpq tries the next, for the store's pool and for
    ``anarchon status`` alike, and neither shows the password."""
    rest = POSTGRES_URL.split("@", 1)[-1].split("://", 1)[-1]  # host:port/db of the server
    user = POSTGRES_URL.split("://", 1)[1].split("@", 1)[0].split(":", 1)[0]
    url = url_with(
        schema,
        f"postgresql://{user}:{SECRET}@127.0.0.1:{free_port()},{rest}",
        target_session_attrs="read-write",
    )
    store = PostgresStore.create(url)
    await store.open()
    try:
        slot = await store.now_ms() - 1_000
        assert (await store.claim(_request("listed", slot))).outcome is Outcome.WON
    finally:
        await store.close()
    done = await asyncio.to_thread(
        subprocess.run,
        [sys.executable, "-m", "anarchon.cli", "status", "--json", url],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    assert "listed" in done.stdout
    assert SECRET not in done.stdout + done.stderr
