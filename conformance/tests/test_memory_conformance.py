"""Certify `memory://`, the reference model, exactly as a third-party backend certifies itself."""

from __future__ import annotations

from anarchon import Capabilities, MemoryStore, RunRecord, __version__
from anarchon_conformance import DEFAULT_PREFIX, BackendHarness, ConformanceSuite


class MemoryHarness(BackendHarness):
    """Stores named ``memory://<fresh name>`` share their runs inside this process."""

    name = "memory"

    def url(self, address: tuple[str, int] | None = None) -> str:
        return f"memory://conf{self.run_id}"

    def process_url(self) -> str | None:
        return None  # the store lives in this process: no OS process can reach it

    @property
    def capabilities(self) -> Capabilities:
        return MemoryStore.create().capabilities

    async def server_version(self) -> str:
        return f"in-process (anarchon {__version__})"

    def backdoor(self, prefix: str) -> MemoryStore:
        return MemoryStore.create(f"conf{self.run_id}", prefix=prefix)

    async def force_expire(self, job: str, slot: int, *, prefix: str = DEFAULT_PREFIX) -> None:
        self.backdoor(prefix).force_expire(job, slot)

    async def raw_run(
        self, job: str, slot: int, *, prefix: str = DEFAULT_PREFIX
    ) -> RunRecord | None:
        return self.backdoor(prefix).raw_run(job, slot)


class TestMemoryConformance(ConformanceSuite):
    harness_class = MemoryHarness
