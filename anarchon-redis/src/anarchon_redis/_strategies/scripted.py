"""`ScriptedStrategy`: a strategy whose claims are calls of one Lua claim script (``batch.lua`` in
front of the strategy's own), packed by hand (`_wire`): one job per call for `claim`, up to
`BATCH` jobs per call for `claim_many`, so the decisions of a batch are those of single claims,
made by the same code."""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Iterator, Sequence
from typing import TYPE_CHECKING, Any, ClassVar, NoReturn, TypeVar
from urllib.parse import unquote

import redis.exceptions as rex

from anarchon.backend import AnarchonError, Claim, ClaimRequest, StoreCorrupt

from .. import _wire as wire
from .._client import Script, guarded, reraising
from .._keys import JobKeys
from .._wire import bulk, invoke
from .base import Strategy

if TYPE_CHECKING:
    from .._connection import Link
    from .._options import RedisOptions

__all__ = ["BATCH", "KEY_CACHE", "ScriptedStrategy"]

T = TypeVar("T")

KEY_CACHE = 100_000
BATCH = 500
"""Jobs per claim script call in `claim_many`. Redis serves nothing else while a script runs:
500 won lease claims take about 5 ms of server time on the development machine."""


class ScriptedStrategy(Strategy):
    """Packing, sending and deciding calls of a claim script; subclasses say what one request
    is in the script's words (`_ask`) and which keys of a job it takes (`_script_keys`)."""

    keys_per_job: ClassVar[int] = 1
    """How many keys of each job the strategy's claim script takes (`_script_keys`)."""

    def __init__(self, options: RedisOptions) -> None:
        super().__init__(options)
        self._packed_keys: dict[str, str] = {}

    def _script_keys(self, keys: JobKeys) -> list[str]:
        """The keys of one job that this strategy's claim script takes, in its order."""
        return [keys.claims]

    def _wire_keys(self, job: str) -> str:
        """`_script_keys` of `job` packed for the wire (`_wire`). Cached: the same jobs claim
        slot after slot; the cache is emptied if it ever holds `KEY_CACHE` jobs."""
        packed = self._packed_keys.get(job)
        if packed is None:
            if len(self._packed_keys) >= KEY_CACHE:
                self._packed_keys.clear()
            packed = "".join([bulk(key) for key in self._script_keys(self.keys(job))])
            self._packed_keys[job] = packed
        return packed

    def _ask(self, request: ClaimRequest) -> str:
        """`request` as the claim script takes it (see the script's header)."""
        raise NotImplementedError

    def _call(self, script: Script, option: str, requests: Sequence[ClaimRequest]) -> bytes:
        """One call (FCALL where the store uses functions, else EVALSHA) of the claim `script`
        for `requests`, packed; `option` is its packed ``claim <number>`` (``batch.lua``)."""
        keys = "".join([self._wire_keys(r.job) for r in requests])
        asks = "".join([bulk(self._ask(r)) for r in requests])
        count = len(requests)
        return invoke(self._head(script), self.keys_per_job * count, keys, 1 + count, option + asks)

    def _call_one(self, script: Script, option: str, request: ClaimRequest) -> bytes:
        """`_call` for one request, without the joins over requests (the single claim's path)."""
        keys = self._wire_keys(request.job)
        ask = option + bulk(self._ask(request))
        return invoke(self._head(script), self.keys_per_job, keys, 2, ask)

    def _head(self, script: Script) -> str:
        """The packed first words of a call of `script`: FCALL where the store uses functions."""
        return script.fcall_head if self.functions and script.function else script.eval_head

    async def _refuse(self, link: Link, job: str, exc: Exception) -> NoReturn:
        """Raise `exc` as anarchon's error for a claim of `job` (a WRONGTYPE names the key)."""
        keys = self.keys(job)
        await guarded(link.client, link.url, keys, self._script_keys(keys), reraising(exc))
        raise exc  # guarded raised already; this line tells the type checker

    async def _decided_one(
        self,
        link: Link,
        script: Script,
        option: str,
        request: ClaimRequest,
        decide: Callable[[ClaimRequest, str], T],
    ) -> T:
        """`_decided` for one request, with less around it: the single claim is the hot path."""
        packed = self._call_one(script, option, request)
        client = link.client
        confirm = link.confirm

        async def send(pool: wire.Pool) -> tuple[Any, str | None]:
            if confirm is not None:
                return await self._confirmed(link, script, packed, request.job, pool)
            try:
                return await wire.call(pool, packed), None
            except rex.ResponseError as exc:
                if not script.missing(exc):  # a restart or a flush forgot it: load, send again
                    raise
                await script.load(client, self.functions)
                return await wire.call(pool, packed), None

        try:
            if link.topology.kind == "cluster":
                answer, shortfall = await link.routed(self.keys(request.job).tag, send)
            else:
                answer, shortfall = await send(client.connection_pool)
        except (rex.RedisError, rex.RedisClusterException, OSError, UnicodeDecodeError) as exc:
            await self._refuse(link, request.job, exc)
        if not isinstance(answer, str):
            await self._refuse(link, request.job, self._odd(link, answer, 1))
        if answer.startswith("error "):
            await self._refuse(link, request.job, rex.ResponseError(unquote(answer[6:])))
        try:
            decided = decide(request, answer)
        except StoreCorrupt as exc:
            await self._refuse(link, request.job, exc)
        if confirm is not None and isinstance(decided, Claim):
            return confirm.claim(decided, shortfall)  # type: ignore[return-value]
        return decided

    async def _confirmed(
        self, link: Link, script: Script, packed: bytes, job: str, pool: wire.Pool
    ) -> tuple[Any, str | None]:
        """One packed call on `pool` followed by the durability commands (`_durability`) in the
        same round trip: its reply, and what fell short of the confirmation (None: confirmed).
        An error reply of the call is raised; NOSCRIPT loads the script and sends all again."""
        confirm = link.confirm
        assert confirm is not None
        whole = packed + confirm.packed(self.keys(job).ack)
        replies = await wire.call_many(pool, whole, 1 + confirm.count)
        if script.missing(replies[0]):  # a restart or a flush forgot it: load, send again
            await script.load(link.client, self.functions)
            replies = await wire.call_many(pool, whole, 1 + confirm.count)
        if isinstance(replies[0], Exception):
            raise replies[0]
        return replies[0], confirm.shortfall(link.url, replies[1:])

    def _odd(self, link: Link, reply: object, jobs: int) -> StoreCorrupt:
        return StoreCorrupt(
            f"Redis at {link.url} answered {str(reply)[:80]!r} to a claim script call of "
            f"{jobs} jobs, which anarchon's scripts never answer"
        )

    async def _decided(
        self,
        link: Link,
        script: Script,
        option: str,
        requests: Sequence[ClaimRequest],
        decide: Callable[[ClaimRequest, str], T],
    ) -> list[T]:
        """`decide(request, answer)` for each request and its answer from the claim `script`
        (``batch.lua``), in order. Up to `BATCH` jobs per call, the calls sent one after another
        on one connection: the next is packed, and the answers of the one before are decided,
        while Redis runs one. Each call is atomic; a batch as a whole is not all-or-nothing. An
        ``error`` answer or an error reply is raised as that job's claim alone would raise it,
        once the whole batch is decided."""
        if link.topology.kind == "cluster":
            return await self._decided_on_nodes(link, script, option, requests, decide)
        chunks = (
            [requests]
            if len(requests) <= BATCH
            else [requests[i : i + BATCH] for i in range(0, len(requests), BATCH)]
        )
        done: list[list[T]] = [[] for _ in chunks]
        failed: list[tuple[str, Exception]] = []

        def calls() -> Iterator[bytes]:
            for chunk in chunks:
                yield self._call(script, option, chunk)

        def take(i: int, reply: Any) -> None:
            chunk = chunks[i]
            if isinstance(reply, Exception):
                failed.append((chunk[0].job, reply))
                return
            lines = reply.split("\n") if isinstance(reply, str) else []
            if len(lines) != len(chunk):
                failed.append((chunk[0].job, self._odd(link, reply, len(chunk))))
                return
            if reply.startswith("error ") or "\nerror " in reply:
                for request, line in zip(chunk, lines, strict=True):
                    if line.startswith("error "):
                        failed.append((request.job, rex.ResponseError(unquote(line[6:]))))
                        return
            try:
                done[i] = [decide(r, line) for r, line in zip(chunk, lines, strict=True)]
            except AnarchonError as exc:  # corrupt data, or a claim refused (C5: ConfigError)
                failed.append((chunk[0].job, exc))

        confirm = link.confirm
        tail = () if confirm is None else confirm.commands(self.keys(requests[0].job).ack)
        try:
            confirmed = await script.send(link.client, calls(), take, self.functions, tail=tail)
            shortfall = None if confirm is None else confirm.shortfall(link.url, confirmed)
        except (rex.RedisError, OSError, UnicodeDecodeError) as exc:
            await self._refuse(link, requests[0].job, exc)
        if failed:
            await self._refuse(link, *failed[0])
        if confirm is not None:
            return [
                confirm.claim(claim, shortfall) if isinstance(claim, Claim) else claim  # type: ignore[misc]
                for chunk in done
                for claim in chunk
            ]
        return [claim for chunk in done for claim in chunk]

    async def _decided_on_nodes(
        self,
        link: Link,
        script: Script,
        option: str,
        requests: Sequence[ClaimRequest],
        decide: Callable[[ClaimRequest, str], T],
    ) -> list[T]:
        """`_decided` in a Redis Cluster: a script may only touch one hash slot, so each job is
        a call of its own; the calls are grouped by the node that serves the job's slot, sent
        one after another on one connection per node, to all nodes at once. Jobs answered MOVED
        (a failover moved their slot; the call did not run) are sent once more after the slot
        map is read again. A lost connection fails the batch (`StoreUnavailable`): the
        scheduler resends it with the same tokens (C2).

        With durability options each node's calls are followed by the ack write and ``WAIT``
        on the same connection (the ack key of the group's first job, served by that node), and
        a ``won`` stands only where its own node's ``WAIT`` confirmed."""
        done: dict[int, T] = {}
        failed: list[tuple[str, Exception]] = []
        moved: list[int] = []
        confirm = link.confirm
        shortfalls: dict[int, str | None] = {}

        async def one(pool: wire.Pool, chosen: list[int], retry: bool) -> None:
            def take(k: int, reply: Any) -> None:
                i = chosen[k]
                request = requests[i]
                if isinstance(reply, rex.MovedError) and retry:
                    moved.append(i)
                elif isinstance(reply, Exception):
                    failed.append((request.job, reply))
                elif not isinstance(reply, str):
                    failed.append((request.job, self._odd(link, reply, 1)))
                elif reply.startswith("error "):
                    failed.append((request.job, rex.ResponseError(unquote(reply[6:]))))
                else:
                    try:
                        done[i] = decide(request, reply)
                    except AnarchonError as exc:
                        failed.append((request.job, exc))

            calls = (self._call_one(script, option, requests[i]) for i in chosen)
            ack = self.keys(requests[chosen[0]].job).ack
            tail = () if confirm is None else confirm.commands(ack)
            try:
                waited = await script.send(
                    link.client, calls, take, self.functions, pool=pool, tail=tail
                )
                if confirm is not None:
                    shortfall = confirm.shortfall(link.url, waited)
                    shortfalls.update(dict.fromkeys(chosen, shortfall))
            except (rex.ConnectionError, rex.TimeoutError, OSError) as exc:
                await link.stale()
                failed.append((requests[chosen[0]].job, exc))
            except (rex.ResponseError, AnarchonError) as exc:  # WAITAOF refused
                failed.append((requests[chosen[0]].job, exc))

        pending = list(range(len(requests)))
        for retry in (True, False):
            groups = await link.pools_for([self.keys(requests[i].job).tag for i in pending])
            await asyncio.gather(
                *(one(pool, [pending[j] for j in indexes], retry) for pool, indexes in groups)
            )
            if not moved or failed:
                break
            await link.stale()
            pending, moved[:] = sorted(moved), []
        if failed:
            await self._refuse(link, *failed[0])
        answers = [done[i] for i in range(len(requests))]
        if confirm is None:
            return answers
        return [
            confirm.claim(answer, shortfalls[i]) if isinstance(answer, Claim) else answer  # type: ignore[misc]
            for i, answer in enumerate(answers)
        ]
