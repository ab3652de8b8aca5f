"""Control through the store (`anarchon.abc.SupportsPause`, `SupportsTrigger`; rules P1, X1) for
the strategies whose claim script keeps them: ``lease`` and ``script``.

A pause is the hash ``{prefix:job}:pause`` (fields ``since``, ``until``, ``reason``, ``by``), in
the job's hash slot, so the claim script reads it in its own atomic step (P1): `pause` writes it
with one script call on Redis TIME (``_scripts/control.lua``), `resume` deletes it (the same
script),
`pauses` finds the pause keys with SCAN (as the job list does, `_keyspace`) and reads them in
one pipelined round trip. A pause past its ``until`` stays until the next `pause` or `resume`
(no key has a TTL): it is inactive, and `pauses` leaves it out.

Triggers are the prefix's sorted set ``{prefix:}:triggers``, scored by when each was written:
`trigger` adds one (``control.lua`` picks its slot on Redis TIME, new for the job and never on
a whole second), `triggers` is one ``ZRANGEBYSCORE``. No claim script touches these keys, so
their own hash tag ``{prefix:}`` is Redis Cluster safe; the documented ACL key pattern
``~{prefix:*`` covers them. A trigger is kept `TRIGGER_KEEP_MS` (a day, longer than any
strategy remembers a run it serves), and removed by a later `trigger`.

`pauses` and `triggers` are plain reads (SCAN, HMGET, TIME, ZRANGEBYSCORE): they work on a store
opened read-only (R1), for the monitoring ACL user too, and answer [] where nothing was written.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from typing import TYPE_CHECKING, Any

from anarchon import check_name
from anarchon.backend import (
    ConfigError,
    Pause,
    StoreCorrupt,
    Trigger,
    check_control_text,
    check_until,
    shown,
)

from ._client import Script, guarded, translated
from ._keys import JobKeys, PrefixKeys
from ._keyspace import job_names

if TYPE_CHECKING:
    from ._connection import Link
    from ._options import RedisOptions

__all__ = ["CONTROL", "TRIGGER_KEEP_MS", "Control"]

CONTROL = Script("control.lua")
TRIGGER_KEEP_MS = 86_400_000
"""How long a trigger stays listed: a day (X1: at least as long as the store remembers a run, a
day where it keeps them by count; the script strategy's window is at most a day)."""
FIELDS = ("since", "until", "reason", "by")


class Control:
    """`pause`, `resume`, `pauses`, `trigger` and `triggers` of a Redis store whose strategy's
    claim script keeps P1 (a base of `RedisLeaseStore` and `ScriptStore`)."""

    link: Link
    options: RedisOptions

    if TYPE_CHECKING:

        def _refused(self) -> RuntimeError: ...

    async def pause(
        self, job: str, *, until_ms: int | None = None, reason: str = "", by: str = ""
    ) -> Pause:
        """P1: pause `job` for every instance (replacing any pause of it) until `until_ms` or
        `resume`; its slots with no run yet are then claimed ``skipped: paused``."""
        check_name(job)
        until_ms, reason, by = (
            check_until(until_ms),
            check_control_text(reason, "reason"),
            check_control_text(by, "by"),
        )
        if self.link.read_only:
            raise self._refused()
        client, keys = self.link.client, JobKeys(self.options.prefix, job)
        args = ["pause", "-" if until_ms is None else str(until_ms), reason, by]

        async def write() -> Any:
            return await CONTROL(client, [keys.pause], args)

        since = await guarded(client, self.link.url, keys, [keys.pause], write)
        return Pause(job=job, since_ms=int(since), until_ms=until_ms, reason=reason, by=by)

    async def resume(self, job: str) -> bool:
        """End the pause of `job` (its hash is deleted); False if it had none, or one that had
        ended by its ``until`` already."""
        check_name(job)
        if self.link.read_only:
            raise self._refused()
        client, keys = self.link.client, JobKeys(self.options.prefix, job)

        async def delete() -> Any:
            return await CONTROL(client, [keys.pause], ["resume"])

        return bool(await guarded(client, self.link.url, keys, [keys.pause], delete) == 1)

    async def pauses(self) -> list[Pause]:
        """The pauses in force by Redis TIME, sorted by job: SCAN for ``{prefix:*}:pause``, then
        one pipelined round trip. Reads only (R1)."""
        client, prefix = self.link.client, self.options.prefix
        with translated(self.link.url):
            jobs = await job_names(client, prefix, "pause")
            # A cluster pipeline refuses TIME (it has no key): asked on its own there.
            cluster = self.link.topology.kind == "cluster"
            pipe = client.pipeline(transaction=False)
            if not cluster:
                pipe.time()
            for job in jobs:
                pipe.hmget(JobKeys(prefix, job).pause, list(FIELDS))
            replies: list[Any] = (
                await pipe.execute(raise_on_error=False) if jobs or not cluster else []
            )
            if cluster:
                replies.insert(0, await client.time())
        seconds, micros = replies[0]
        now = int(seconds) * 1000 + int(micros) // 1000
        found = []
        for job, fields in zip(jobs, replies[1:], strict=True):
            key = JobKeys(prefix, job).pause
            if isinstance(fields, Exception):
                raise StoreCorrupt(
                    f"Redis at {self.link.url}: key {key} holds another type than the hash "
                    f"anarchon writes there ({fields}): remove it or use another prefix"
                )
            pause = _pause(job, fields, key)
            if pause is not None and pause.active(now):
                found.append(pause)
        return found

    async def trigger(self, job: str, *, reason: str = "", by: str = "") -> Trigger:
        """X1: ask for a run of `job` now; its ad-hoc slot is Redis TIME (never on a whole
        second, new for the job), which every instance finds with `triggers`."""
        check_name(job)
        reason, by = check_control_text(reason, "reason"), check_control_text(by, "by")
        if self.link.read_only:
            raise self._refused()
        client, keys = self.link.client, PrefixKeys(self.options.prefix)
        names = [keys.triggers, keys.trigger_slots]
        with self._trigger_keys():
            reply: Any = await CONTROL(client, names, ["trigger", job, reason, by, TRIGGER_KEEP_MS])
        slot, _, now = str(reply).partition(" ")
        return Trigger(job=job, slot=int(slot), requested_at=int(now), reason=reason, by=by)

    async def triggers(self, since_ms: int) -> list[Trigger]:
        """The triggers written at or after `since_ms` (Redis TIME), oldest first: one
        ``ZRANGEBYSCORE``. Reads only (R1)."""
        key = PrefixKeys(self.options.prefix).triggers
        with self._trigger_keys():
            rows: Any = await self.link.client.zrangebyscore(key, since_ms, "+inf", withscores=True)
        return [_trigger(member, score, key) for member, score in rows]

    @contextmanager
    def _trigger_keys(self) -> Iterator[None]:
        """`translated`, with a WRONGTYPE on the prefix's trigger keys naming them."""
        keys = PrefixKeys(self.options.prefix)
        try:
            with translated(self.link.url):
                yield
        except StoreCorrupt as exc:
            if "WRONGTYPE" not in str(exc):
                raise
            raise StoreCorrupt(
                f"Redis at {self.link.url}: key {keys.triggers} (anarchon keeps a sorted set "
                f"there) or {keys.trigger_slots} (a hash) holds another type: another program "
                "uses it; remove it or use another prefix"
            ) from None


def _pause(job: str, fields: list[str | None], key: str) -> Pause | None:
    since, until, reason, by = fields
    if since is None and until is None:
        return None  # deleted between SCAN and the read
    try:
        return Pause(
            job=job,
            since_ms=int(since or "0"),
            until_ms=None if until == "-" else int(until or ""),
            reason=reason or "",
            by=by or "",
        )
    except ValueError:
        raise StoreCorrupt(
            f"Redis key {key} holds since={shown(since)} until={shown(until)}; anarchon writes "
            "epoch milliseconds there (until: or -): resume the job (anarchon resume) or "
            "delete the key"
        ) from None


def _trigger(member: str, score: float, key: str) -> Trigger:
    """A member of the trigger list (``<slot> <job> <n> <by><reason>``) as a `Trigger`."""
    try:
        slot, job, size, rest = member.split(" ", 3)
        n = int(size)
        rest_bytes = rest.encode()
        if n > len(rest_bytes):
            raise ValueError
        return Trigger(
            job=check_name(job),
            slot=int(slot),
            requested_at=int(score),
            by=rest_bytes[:n].decode(),
            reason=rest_bytes[n:].decode(),
        )
    except (ValueError, ConfigError):
        raise StoreCorrupt(
            f"Redis key {key} holds the member {shown(member)}, which is not a trigger anarchon "
            "writes (<slot> <job> <n> <by><reason>): remove it (ZREM)"
        ) from None
