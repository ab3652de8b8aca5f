"""`Strategy`: what one ``strategy=`` option must do. The store (`anarchon_redis._store`) owns the
connection's life (open, close, the server's clock) and hands every claim, batch and history
read to its strategy, with the `Link` to use; a strategy never sees the store. This is the shape
of the NATS backend's strategies too: built from the options (`strategy_for`), given the store's
link with each call.

A strategy:

* says what the store can do with the options given (`capabilities`);
* sets itself up when the store opens (`setup`: load its scripts, check the server has what it
  needs);
* decides claims one at a time (`claim`) and many at once (`claim_many`, the same decisions);
* reads a job's history (`history`), lists the jobs that have runs (`jobs`), and checks at a
  read-only open that the prefix holds its keys (`check_set_up`), reading only (R1).

The lease strategy also renews, finishes, releases and checks runs (`LeaseStrategy`), which
the store forwards as a `LeaseStore`; idmp also sets jobs up when a scheduler starts
(`setup_jobs`).
"""

from __future__ import annotations

import abc
from collections.abc import Sequence
from typing import TYPE_CHECKING, ClassVar

from anarchon.backend import Capabilities, Claim, ClaimRequest, RunRecord, StoreNotSetUp

from .._client import translated
from .._keys import JobKeys
from .._keyspace import KINDS, job_names, kinds_under

if TYPE_CHECKING:
    from .._connection import Link
    from .._options import RedisOptions

__all__ = ["Strategy"]


class Strategy(abc.ABC):
    """How claims of one ``strategy=`` are decided."""

    name: ClassVar[str]
    """The ``strategy=`` value this class implements."""
    run_key: ClassVar[str]
    """The kind of key (`anarchon_redis._keyspace.KINDS`) a job has once a run of it is
    remembered: ``runs`` for lease, ``claims`` for the stream strategies."""

    def __init__(self, options: RedisOptions) -> None:
        self.options = options
        self.functions = False
        """The claim script is called as a Redis function (`Script.load_function`); `setup`
        decides, for the server it meets."""

    def __repr__(self) -> str:
        return f"{type(self).__name__}(prefix={self.options.prefix!r})"

    def keys(self, job: str) -> JobKeys:
        return JobKeys(self.options.prefix, job)

    @property
    @abc.abstractmethod
    def capabilities(self) -> Capabilities:
        """What a store with this strategy and these options can do."""

    async def setup(self, link: Link) -> None:  # noqa: B027 (nothing by default)
        """Set up on open (load scripts, check the server supports the strategy)."""

    @abc.abstractmethod
    async def claim(self, link: Link, request: ClaimRequest) -> Claim:
        """One claim, decided in one atomic step."""

    @abc.abstractmethod
    async def claim_many(self, link: Link, requests: Sequence[ClaimRequest]) -> list[Claim]:
        """Claims of many jobs, each answered as its single `claim` would be, in order."""

    @abc.abstractmethod
    async def history(self, link: Link, job: str, limit: int = 100) -> list[RunRecord]:
        """The job's most recent runs, newest slot first, at most `limit`."""

    async def jobs(self, link: Link) -> list[str]:
        """`anarchon.abc.SupportsJobList`: the jobs with a `run_key` under the prefix, sorted
        (SCAN, see `anarchon_redis._keyspace`)."""
        with translated(link.url):
            return await job_names(link.client, self.options.prefix, self.run_key)

    async def check_set_up(self, link: Link) -> None:
        """A read-only open's check (R1): the prefix holds keys of this strategy, else
        `StoreNotSetUp` saying where it looked (and which strategy wrote the keys it found).
        Reads only: SCAN, no script loaded, nothing written."""
        prefix = self.options.prefix
        found = await kinds_under(link.client, prefix, self.run_key)
        if self.run_key in found:
            return
        where = (
            f"Redis at {link.url} (database {link.url.path or '0'}) has no key of "
            f"strategy={self.name} under prefix {prefix!r} ({{{prefix}:<job>}}:{self.run_key})"
        )
        if found:
            kind, key = next(iter(found.items()))
            names = KINDS[kind]
            others = "strategy=" + (
                names[0] if len(names) == 1 else f"{', '.join(names[:-1])} or {names[-1]}"
            )
            raise StoreNotSetUp(
                f"{where}, but has keys of {others} (such as {key}): give the strategy the "
                "schedulers use (?strategy=...)"
            )
        raise StoreNotSetUp(
            f"{where}, nor any key of anarchon's there: no scheduler has claimed a job under "
            "this prefix in this database. Check the URL's database number (/0) and its "
            "?prefix="
        )
