"""What the store knows of the server behind it: whether a restart would empty it (read at open)
and whether it restarted since (its run id).

A Redis without persistence (no RDB snapshots, no AOF) comes back from a restart empty: every
run it held is forgotten, so a slot still within ``max_late`` can be won a second time (a chaos
run saw 15 duplicate winners that way, and nothing noticed). At open the store reads
``CONFIG GET save`` and ``appendonly``; where ``CONFIG`` is refused (ACL, renamed away, a managed
service) it falls back to ``INFO persistence``, which tells whether AOF is on but not the RDB
schedule, and says what it could not read. It warns (logger ``anarchon.store``) when a restart
would empty the server, and refuses to open (`ConfigError`) with ``require_persistence=true``.

Restarts: the server's ``run_id`` (``INFO server``) is read at open, then again at most every
`restart_check_ms` and after a connection failure, on the next claim; never once per claim. A
changed run id is logged once (WARNING), counted in `ServerWatch.restarts`, kept as
`ServerWatch.notice` (which `RedisStore.notices` shows) and told to the runtime's observers as
a store error (`ServerRestarted`), which the Prometheus plugin counts under
``operation="server_restart"``.
"""

from __future__ import annotations

import logging
import time
from typing import Any

import redis.asyncio as aioredis
import redis.exceptions as rex

from anarchon.backend import ConfigError, StoreURL

from ._options import RedisOptions

__all__ = ["Persistence", "ServerRestarted", "ServerWatch", "read_persistence"]

log = logging.getLogger("anarchon.store")


class ServerRestarted(Exception):
    """The Redis server restarted (its run id changed) while the store was open: runs it held
    may be forgotten. Not raised: told to observers (``anarchon_store_error``) and logged."""


class Persistence:
    """The server's persistence settings as far as they could be read."""

    def __init__(
        self,
        *,
        save: str | None,
        appendonly: bool | None,
        appendfsync: str | None,
        unread: str | None = None,
    ) -> None:
        self.save = save
        """``CONFIG GET save`` (``""``: no snapshots); None when it could not be read."""
        self.appendonly = appendonly
        self.appendfsync = appendfsync
        self.unread = unread
        """What could not be read, and why; None when everything was."""

    @property
    def forgets(self) -> bool | None:
        """True when a restart would empty the server, None when that cannot be told."""
        if self.appendonly:
            return False
        if self.save is not None and self.save.strip():
            return False
        if self.appendonly is None or self.save is None:
            return None
        return True

    def describe(self) -> str:
        parts = [
            f"appendonly={'?' if self.appendonly is None else 'yes' if self.appendonly else 'no'}",
            f"save={'?' if self.save is None else repr(self.save)}",
        ]
        if self.appendonly and self.appendfsync:
            parts.append(f"appendfsync={self.appendfsync}")
        return ", ".join(parts)


async def read_persistence(client: aioredis.Redis) -> Persistence:
    """`Persistence` from ``CONFIG GET``, or from ``INFO persistence`` where CONFIG is refused."""
    try:
        found: dict[Any, Any] = {}
        for name in ("save", "appendonly", "appendfsync"):
            found.update(await client.config_get(name))
        return Persistence(
            save=found.get("save"),
            appendonly=None if "appendonly" not in found else found["appendonly"] == "yes",
            appendfsync=found.get("appendfsync"),
        )
    except rex.ResponseError as exc:  # NOPERM, or CONFIG renamed away
        why = f"CONFIG GET refused ({str(exc)[:120]})"
    try:
        info: dict[str, Any] = await client.info("persistence")
    except rex.ResponseError as exc:
        return Persistence(
            save=None,
            appendonly=None,
            appendfsync=None,
            unread=f"{why}; INFO persistence refused too ({str(exc)[:120]})",
        )
    enabled = info.get("aof_enabled")
    return Persistence(
        save=None,
        appendonly=None if enabled is None else bool(int(enabled)),
        appendfsync=None,
        unread=f"{why}; INFO persistence does not show the RDB snapshot schedule (save)",
    )


def judge(url: StoreURL, options: RedisOptions, found: Persistence) -> None:
    """Warn, or refuse with ``require_persistence=true``, when a restart would empty the server
    (or that cannot be told)."""
    forgets = found.forgets
    if forgets is False:
        return
    if forgets:
        text = (
            f"Redis at {url} has no persistence ({found.describe()}): a restart empties it, and "
            "slots it forgot can be won a second time. Turn on AOF (appendonly yes, appendfsync "
            "always for no loss) or RDB snapshots"
        )
    else:
        text = (
            f"Redis at {url}: could not tell whether a restart would empty it "
            f"({found.describe()}; {found.unread})"
        )
    if options.require_persistence:
        raise ConfigError(
            f"{text}; require_persistence=true refuses such a server (remove the option to "
            "open it with a warning)"
            + ("; or let the user run CONFIG GET (+config|get)" if forgets is None else "")
        )
    log.warning("%s", text, extra={"store": str(url), "persistence": found.describe()})


class ServerWatch:
    """The server's run id, read at open and then at most every `restart_check_ms`."""

    def __init__(self, url: StoreURL, options: RedisOptions) -> None:
        self.url = url
        self.every_s = options.restart_check_ms / 1000
        self.run_id: str | None = None
        self.checked = 0.0
        self.restarts = 0
        """Restarts seen since the store opened."""
        self.notice: str | None = None
        """The last restart seen, in words (for health); None when none was."""
        self.persistence: Persistence | None = None

    def due(self) -> bool:
        return time.monotonic() - self.checked >= self.every_s

    def connected(self, connection: object) -> None:
        """redis-py's connect callback: a new connection may reach a restarted server."""
        self.checked = 0.0

    def failed(self) -> None:
        """A call failed on the connection: read the run id on the next call."""
        self.checked = 0.0

    async def read(self, client: aioredis.Redis) -> ServerRestarted | None:
        """Read the run id; a `ServerRestarted` (logged once here) when it changed."""
        self.checked = time.monotonic()  # concurrent calls do not read it again meanwhile
        info: dict[str, Any] = await client.info("server")
        run_id = str(info.get("run_id", "")) or None
        before, self.run_id = self.run_id, run_id
        if before is None or run_id is None or before == run_id:
            return None
        self.restarts += 1
        uptime = info.get("uptime_in_seconds", "?")
        persistence = self.persistence.describe() if self.persistence else "unknown persistence"
        self.notice = (
            f"Redis at {self.url} restarted (run id {before[:8]}… -> {run_id[:8]}…, up for "
            f"{uptime} s, {persistence}): the runs it held before may be forgotten, and their "
            "slots won again"
        )
        log.warning(
            "%s",
            self.notice,
            extra={"store": str(self.url), "restarts": self.restarts, "run_id": run_id},
        )
        return ServerRestarted(self.notice)
