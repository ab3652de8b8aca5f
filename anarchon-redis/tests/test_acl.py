"""The ACL permissions the docs list (docs/backends/redis.md, "ACL permissions") are enough for
every strategy: a user restricted to them claims, batches, renews, finishes and reads history,
and pauses, resumes and triggers where the strategy can (lease, script)."""

from __future__ import annotations

import re
import uuid
from pathlib import Path
from typing import TYPE_CHECKING
from urllib.parse import urlsplit

import pytest

import anarchon
from anarchon import (
    LeaseStore,
    Outcome,
    RunStatus,
    SupportsClaimMany,
    SupportsPause,
    SupportsTrigger,
)
from anarchon_redis._strategies.idmp import IDMP
from anarchon_redis._strategies.lease import LEASE
from anarchon_redis._strategies.script import WINDOW

if TYPE_CHECKING:
    from conftest import EnvFactory

DOCS = Path(__file__).parents[2] / "docs" / "backends" / "redis.md"


def documented_commands() -> list[str]:
    """The ``+command`` words of the ``ACL SETUSER`` the docs show (``+xcfgset``, which the docs
    add for idmp on Redis 8.6, is not in it)."""
    text = DOCS.read_text(encoding="utf-8")
    block = text.split("ACL SETUSER app", 1)[1].split("```", 1)[0]
    return re.findall(r"\+[a-z|]+", block)


@pytest.mark.parametrize(
    ("server", "strategy", "functions"),
    [
        pytest.param("redis", "lease", True, id="redis-lease"),
        pytest.param("redis", "lease", False, id="redis-lease-without-functions"),
        pytest.param("redis", "stream-id", False, id="redis-stream-id"),
        pytest.param("redis", "script", True, id="redis-script"),
        pytest.param("redis86", "idmp", True, id="redis86-idmp"),
        pytest.param("valkey", "lease", True, id="valkey-lease"),
    ],
)
async def test_documented_acl_is_enough(
    env_on: EnvFactory, server: str, strategy: str, functions: bool
) -> None:
    """Without ``+fcall +function|load`` the claims are scripts (the docs say so)."""
    env = await env_on(server)
    user, password = "anarchon-" + uuid.uuid4().hex[:8], uuid.uuid4().hex
    extra = ["+xcfgset"] if strategy == "idmp" else []
    if strategy == "lease" and not functions:
        extra = ["-fcall", "-function|load"]
    await env.raw.execute_command(
        "ACL", "SETUSER", user, "on", f">{password}", "resetkeys", f"~{{{env.prefix}:*",
        "-@all", *documented_commands(), *extra,
    )  # fmt: skip
    try:
        parts = urlsplit(env.url)
        url = f"redis://{user}:{password}@{parts.hostname}:{parts.port}/0"
        store = await anarchon.connect(url, strategy=strategy, prefix=env.prefix)
        try:
            slot = await env.slot()
            mine = env.request("job", slot)
            assert (await store.claim(mine)).won
            rival = await store.claim(env.request("job", slot, instance="rival"))
            assert rival.outcome in (Outcome.LOST, Outcome.RUNNING)
            assert isinstance(store, SupportsClaimMany)
            batch = await store.claim_many([env.request(f"b{i}", slot) for i in range(3)])
            assert all(c.won for c in batch)
            assert [r.slot for r in await store.history("job")] == [slot]
            if isinstance(store, LeaseStore):
                assert (await store.check(env.request("job", slot))).outcome is Outcome.RUNNING
                assert await store.renew("job", slot, mine.token, 60_000)
                assert await store.release("b0", slot, batch[0].token or "")
                assert await store.finish("job", slot, mine.token, RunStatus.SUCCEEDED)
            await env.raw.script_flush()  # the scripts are sent whole again, as after a restart
            if functions:  # ours only: the server is shared
                script = {"lease": LEASE, "script": WINDOW, "idmp": IDMP}[strategy]
                await env.raw.function_delete(script.function)
            assert (await store.claim(env.request("after", slot))).won
            if isinstance(store, SupportsPause) and isinstance(store, SupportsTrigger):
                pause = await store.pause("paused", reason="freeze", by="ops")
                assert await store.pauses() == [pause]
                paused = await store.claim(env.request("paused", slot))
                assert paused.outcome is Outcome.SKIPPED
                assert await store.resume("paused")
                trigger = await store.trigger("job")
                assert await store.triggers(0) == [trigger]
                assert (await store.claim(env.request("job", trigger.slot))).won
            assert store.strategy.functions is functions  # type: ignore[attr-defined]
        finally:
            await store.close()
    finally:
        await env.raw.execute_command("ACL", "DELUSER", user)
