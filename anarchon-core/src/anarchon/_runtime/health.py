"""What a scheduler can say about itself (`Scheduler.health()`), and a tiny HTTP endpoint for
liveness and readiness probes (Kubernetes ``httpGet``), on the standard library alone."""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
from collections.abc import Callable, Mapping
from typing import Any

import attrs

from .._claims import Outcome
from .._fleet import Member

__all__ = ["Health", "HealthServer", "LastClaim", "RunningJob"]

log = logging.getLogger("anarchon.health")

MAX_REQUEST_BYTES = 8192
READ_TIMEOUT_S = 5.0


@attrs.frozen(kw_only=True)
class LastClaim:
    """The latest claim this instance sent for a job."""

    slot: int
    outcome: Outcome
    attempt: int
    holder: str | None = None
    lease_until: int | None = None


@attrs.frozen(kw_only=True)
class RunningJob:
    """A run this instance is executing."""

    job: str
    slot: int
    attempt: int
    started_at: int
    """When this instance started it, epoch ms (local clock)."""
    fenced: bool = False


@attrs.frozen(kw_only=True)
class Health:
    """A snapshot of one scheduler, for probes and dashboards. Every text is redacted."""

    instance: str
    store: str
    """The store URL, password redacted."""
    started: bool
    """True between `start()` and `stop()`."""
    started_at: int | None
    """When the scheduler started, epoch ms; None when it is not running."""
    store_reachable: bool
    """False from the first failed store call of an outage until a call succeeds again."""
    store_open: bool = True
    """The store has been opened and the jobs dispatched; False while a degraded start waits
    for it."""
    store_down_since: int | None
    """Start of the current outage, epoch ms; None when the store answers."""
    last_error: str | None
    """The last store error (redacted), even after the store came back."""
    clock_offset_ms: int
    """Store clock minus local clock (T2); 0 for stores without a clock."""
    clock_round_trip_ms: float | None
    """Round trip of the sample the offset came from; None before the first measure."""
    running: tuple[RunningJob, ...] = ()
    last_claims: Mapping[str, LastClaim] = attrs.field(factory=dict)
    """By job name."""
    damaged_jobs: Mapping[str, str] = attrs.field(factory=dict)
    """Jobs whose last claim the store answered with data anarchon cannot read (`StoreCorrupt`:
    a damaged row, key or message), with the error (redacted). The instance is not ready while
    any is listed; a job leaves the list when a claim of it succeeds."""
    paused: Mapping[str, str] = attrs.field(factory=dict)
    """Jobs whose last claims the store answered ``skipped: paused`` (P1: paused for the whole
    fleet with ``anarchon pause``), with that reason; a job leaves the list when a later slot
    is claimed again. A paused job does not make the instance unready."""
    members: tuple[Member, ...] = ()
    """The fleet's live members as this instance last read them (stores with a member list,
    DESIGN section 12): instance, last heartbeat, and the `stats` each published (claims,
    reads, fallbacks, orphans, wins, job_set). Empty without a member list."""
    fleet_stats: Mapping[str, int] = attrs.field(factory=dict)
    """This instance's own fleet counters (as it publishes them): claims at the slot as a
    contender, reads (later claims: as a watcher, or for slots whose contenders and watchers
    all left), fallbacks (of those, slots it found undecided and decided), orphans (of those,
    the ones claimed because everyone ranked above had left), wins. Empty without a member
    list."""
    store_notices: tuple[str, ...] = ()
    """What the store noticed about its server and wants an operator to see (redacted), from
    the store's optional ``notices`` attribute: e.g. Redis says that its server restarted (its
    run id changed: runs it held may be forgotten) or that replicas did not confirm claims.
    They do not make the instance unready."""

    @property
    def live(self) -> bool:
        """The event loop answered (whoever reads this value got it from a working loop)."""
        return True

    @property
    def ready(self) -> bool:
        """Started, the store opened, it answers, and no job's claims fail on damaged data
        (`damaged_jobs`): the instance can win runs."""
        return self.started and self.store_open and self.store_reachable and not self.damaged_jobs

    def to_dict(self) -> dict[str, Any]:
        """JSON-ready: enums as strings, times as epoch ms."""
        data: dict[str, Any] = attrs.asdict(self, recurse=True, value_serializer=_plain)
        data["running"] = list(data["running"])
        data["members"] = [dict(m, stats=dict(m["stats"])) for m in data["members"]]
        data["store_notices"] = list(data["store_notices"])
        data["live"] = self.live
        data["ready"] = self.ready
        return data


def _plain(_: object, __: object, value: Any) -> Any:
    return str(value) if isinstance(value, Outcome) else value


class HealthServer:
    """``GET /healthz`` (liveness: the loop answers, always 200) and ``GET /readyz`` (200 when
    ready, else 503), both with `Health` as JSON. Runs on the scheduler's event loop, so a loop
    blocked by a job that forgot to be async fails the liveness probe, as it should."""

    def __init__(self, health: Callable[[], Health], *, host: str, port: int) -> None:
        self._health = health
        self.host = host
        self.port = port
        self._server: asyncio.Server | None = None

    async def start(self) -> None:
        self._server = await asyncio.start_server(self._handle, self.host, self.port)
        sockets = self._server.sockets
        if sockets:
            self.port = int(sockets[0].getsockname()[1])
        log.info(
            "health endpoint on http://%s:%d/healthz and /readyz",
            self.host,
            self.port,
            extra={"port": self.port},
        )

    async def close(self) -> None:
        if self._server is not None:
            self._server.close()
            await self._server.wait_closed()
            self._server = None

    def answer(self, method: str, path: str) -> tuple[int, dict[str, Any]]:
        """The status code and JSON body for a request line."""
        path = path.split("?", 1)[0].rstrip("/") or "/"
        if method not in ("GET", "HEAD"):
            return 405, {"error": "use GET"}
        if path in ("/healthz", "/livez"):
            return 200, self._health().to_dict()
        if path == "/readyz":
            health = self._health()
            return (200 if health.ready else 503), health.to_dict()
        return 404, {"error": "not found; try /healthz or /readyz"}

    async def _handle(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        head_only = False
        try:
            head = await asyncio.wait_for(reader.readuntil(b"\r\n\r\n"), READ_TIMEOUT_S)
            if len(head) > MAX_REQUEST_BYTES:
                raise ValueError("request too large")
            parts = head.split(b"\r\n", 1)[0].decode("latin-1").split()
            if len(parts) < 2:
                raise ValueError("bad request line")
            head_only = parts[0] == "HEAD"
            status, body = self.answer(parts[0], parts[1])
        except (asyncio.IncompleteReadError, asyncio.LimitOverrunError, asyncio.TimeoutError):
            writer.close()
            return
        except ValueError:
            status, body = 400, {"error": "bad request"}
        payload = json.dumps(body).encode()
        reason = {200: "OK", 400: "Bad Request", 404: "Not Found", 405: "Method Not Allowed"}
        writer.write(
            f"HTTP/1.1 {status} {reason.get(status, 'Service Unavailable')}\r\n"
            "Content-Type: application/json\r\n"
            f"Content-Length: {len(payload)}\r\n"
            "Connection: close\r\n\r\n".encode()
            + (b"" if head_only else payload)
        )
        with contextlib.suppress(ConnectionError):
            await writer.drain()
        writer.close()
