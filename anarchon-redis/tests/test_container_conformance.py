"""Certify Redis in a container, as an author with no Redis of their own would.

`anarchon_conformance.containers` starts one Redis container for the test process through
testcontainers: the official ``redis:7`` image, or the one ``ANARCHON_TEST_REDIS_IMAGE`` names
(``scripts/dev test`` builds ``anarchon/redis:bookworm`` from Debian's packages with
``scripts/container-images``, as no registry is reachable here). The kit then runs against it
with the same harnesses as test_conformance.py, whatever server ``ANARCHON_TEST_REDIS_URL``
names. Skipped, with the reason, where no Docker engine answers.
"""

from __future__ import annotations

from anarchon_conformance import ConformanceSuite
from anarchon_conformance.containers import REDIS, container_url

from .test_conformance import LeaseHarness


class InContainer(LeaseHarness):
    """The lease strategy on this test process's Redis container."""

    async def setup(self) -> None:
        self.given_url = container_url(REDIS)
        await super().setup()
        assert self.address() == _address(self.given_url), "the harness must use the container"

    async def server_version(self) -> str:
        return f"{await super().server_version()} in a container of {REDIS.image_name()}"


class ScriptInContainer(InContainer):
    """The script strategy (a Lua claim) on the same container."""

    strategy = "script"


def _address(url: str) -> tuple[str, int]:
    host, port = url.split("://", 1)[1].split("/", 1)[0].rsplit(":", 1)
    return host, int(port)


class TestRedisLeaseInContainer(ConformanceSuite):
    harness_class = InContainer


class TestRedisScriptInContainer(ConformanceSuite):
    harness_class = ScriptInContainer
