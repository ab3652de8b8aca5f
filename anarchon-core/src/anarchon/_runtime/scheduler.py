"""`Scheduler`: every instance schedules every job; the store decides who runs each slot.

Over 400 lines (about 500): it is the public face, for async and sync code alike, and its
docstrings (every setting of `job()`, each step of the lifecycle in both) are much of it. The work
is elsewhere: `dispatcher` (claims and runs), `opening` (the store at start), `snapshot`
(health), `in_thread` (the scheduler's thread when started from sync code)."""

from __future__ import annotations

import asyncio
import logging
import signal
import threading
import time
from collections.abc import Awaitable, Callable, Mapping
from types import TracebackType
from typing import Any, TypeVar

from typing_extensions import Self

from .._claims import Claim, Overlap
from .._connect import create_store
from .._durations import DurationLike
from .._errors import ConfigError, StoreUnavailable
from .._retries import Backoff
from .._urls import redact
from ..abc import ClaimStore
from ..plugins import PluginManager, StartedScheduler, plugin_manager
from .catch_up import CatchUp
from .clock import LocalClock, StoreClock, SystemClock
from .context import RuntimeContext
from .dispatcher import Dispatcher
from .execution import Execution
from .fleet import make_fleet
from .health import Health, HealthServer
from .in_thread import EXIT_MARGIN_S, STARTED, SchedulerThread
from .jobs import JobSpec, fit_to_store, make_job, set_up_jobs
from .opening import open_store, open_when_it_answers
from .settings import Settings, default_instance_id, load_settings
from .snapshot import health_snapshot
from .store_health import StoreHealth

__all__ = ["Scheduler"]

log = logging.getLogger("anarchon.scheduler")

F = TypeVar("F", bound=Callable[..., Any])


class Scheduler:
    """Schedules jobs on every instance; one atomic claim per (job, slot) picks the single runner.

    >>> scheduler = Scheduler("sqlite:///anarchon.db")
    >>> @scheduler.job("*/5 * * * *")
    ... def report() -> None: ...

    `run()` blocks until SIGINT/SIGTERM; async applications use ``async with scheduler:`` (which
    starts and stops it) or ``await scheduler.serve()``; sync ones (gunicorn, uWSGI, Flask,
    threads) call `start()`, which runs it in a background thread, and `shutdown()`.

    trigger_poll (``ANARCHON_TRIGGER_POLL``, default 2 s, 0: off): how often it asks the store
    for runs triggered with ``anarchon trigger`` (X1) on stores that have them; a triggered run
    starts within about one poll.

    On a store with a member list (`Capabilities.membership`; DESIGN section 12), instances
    announce themselves every fleet_refresh (``ANARCHON_FLEET_REFRESH``, default 5 s) with the
    fingerprint of their jobs, and among those with the same jobs only `contenders`
    (``ANARCHON_CONTENDERS``, default 2; 0 or ``off``: all instances, no member list) claim each
    (job, slot) at its slot; `fleet_watchers` more (``ANARCHON_FLEET_WATCHERS``, default 1)
    claim it fleet_grace later (``ANARCHON_FLEET_GRACE``, default 500 ms, at most half a job's
    max_late; the claim reads first), and the rest only if all of those left the list. See the
    docs' "Fleet" page.
    """

    def __init__(
        self,
        store: str | ClaimStore | None = None,
        *,
        instance: str | None = None,
        prefix: str | None = None,
        grace: DurationLike | None = None,
        clock_skew: DurationLike | None = None,
        start_timeout: DurationLike | None = None,
        claim_timeout: DurationLike | None = None,
        health_port: int | None = None,
        catch_up: str | CatchUp | None = None,
        fail_fast: bool | None = None,
        trigger_poll: DurationLike | None = None,
        contenders: int | str | None = None,
        fleet_watchers: int | str | None = None,
        fleet_grace: DurationLike | None = None,
        fleet_refresh: DurationLike | None = None,
        clock: LocalClock | None = None,
        environ: Mapping[str, str] | None = None,
    ) -> None:
        settings = load_settings(
            {
                "store": store if isinstance(store, str) else None,
                "instance": instance,
                "prefix": prefix,
                "grace": grace,
                "clock_skew": clock_skew,
                "start_timeout": start_timeout,
                "claim_timeout": claim_timeout,
                "health_port": health_port,
                "catch_up": catch_up,
                "fail_fast": fail_fast,
                "trigger_poll": trigger_poll,
                "contenders": contenders,
                "fleet_watchers": fleet_watchers,
                "fleet_grace": fleet_grace,
                "fleet_refresh": fleet_refresh,
            },
            environ=environ,
        )
        self.settings: Settings = settings
        self.instance = settings.instance or default_instance_id()
        if isinstance(store, ClaimStore):
            if (
                prefix is not None
                and getattr(getattr(store, "options", None), "prefix", prefix) != prefix
            ):
                raise ConfigError(
                    "prefix is set both on the store and on the Scheduler, differently; set it once"
                )
            self.store = store
            self._owns_store = False
        else:
            options = {"prefix": settings.prefix} if settings.prefix else {}
            self.store = create_store(settings.store, **options)
            self._owns_store = True
        self.store_name = str(getattr(self.store, "url", type(self.store).__name__))
        self.clock = clock or SystemClock()
        self.jobs: dict[str, JobSpec] = {}
        self.events: PluginManager = plugin_manager()
        self.store_health = StoreHealth(self.store_name, self.events)
        self.store_clock = StoreClock(self.clock, self.store.now_ms)
        self.context = RuntimeContext(
            store=self.store,
            clock=self.store_clock,
            health=self.store_health,
            events=self.events,
            instance=self.instance,
        )
        self.fleet = make_fleet(self.context, settings)
        """This instance's part in the fleet (member list, roles, counters); None on stores
        without membership or with ``contenders=0``."""
        self.dispatcher = Dispatcher(
            self.context,
            clock_skew_ms=settings.clock_skew_ms,
            claim_timeout_s=settings.claim_timeout_ms / 1000,
            trigger_poll_ms=settings.trigger_poll_ms,
            fleet=self.fleet,
        )
        self._stop = asyncio.Event()
        self._stop_requested = False
        self._started = False
        self._started_at: int | None = None
        self._health_server: HealthServer | None = None
        self._store_open = False
        self._connecting: asyncio.Task[None] | None = None
        self._thread: SchedulerThread | None = None

    @property
    def executions(self) -> set[Execution]:
        """The runs this instance is executing now."""
        return self.dispatcher.executions

    @property
    def last_claims(self) -> dict[str, tuple[int, Claim]]:
        """Per job, the latest slot this instance claimed and the answer."""
        return self.dispatcher.last_claims

    # -- jobs -----------------------------------------------------------------------------------
    def job(
        self,
        cron: str | None = None,
        *,
        every: DurationLike | None = None,
        offset: DurationLike | None = None,
        name: str | None = None,
        tz: str = "UTC",
        lease: DurationLike | None = None,
        max_late: DurationLike | None = None,
        overlap: str | Overlap | None = None,
        attempts: int = 3,
        heartbeat: DurationLike | None = None,
        catch_up: str | CatchUp | None = None,
        timeout: DurationLike | None = None,
        retries: int = 0,
        backoff: DurationLike | Mapping[str, Any] | Backoff | None = None,
    ) -> Callable[[F], F]:
        """Decorator: run the function at each slot of `cron` (5 fields, or 6 with seconds first)
        in zone `tz`, or of the interval `every`, on exactly one instance.

        every: instead of `cron`, an interval of whole seconds (``"30s"``, ``"1h"``, at least
        1 s) whose slots are aligned to the Unix epoch (``k * every``, UTC), so that every
        instance computes the same ones; offset: shifts them within the interval (``every="1h",
        offset="15m"``: 15 minutes past each hour, UTC; from 0 up to `every`). Exactly one of
        `cron` and `every`; `tz` applies to `cron` only (an interval has no zone and no daylight
        saving: any zone but UTC is a `ConfigError`).

        lease: how long a winner holds the run without renewing (default 60 s, at most a day);
        heartbeat: how often it renews (default lease / 3); max_late: how long after its slot a
        run may still start (default the job's interval, at most 60 s; at most 31 days); overlap: ``"skip"`` a slot while an
        earlier run still holds a lease (default where the store supports it) or ``"allow"``;
        attempts: how many instances may try a run in turn after crashes (default 3);
        catch_up: what becomes of slots reached late, at start or after a stall (T6):
        ``"latest"`` runs the newest and records the older ones skipped (``coalesced``; the
        scheduler's default unless set), ``"all"`` runs each within max_late one after another,
        ``"none"`` records them skipped;
        timeout: how long a run may take (default no limit): past it, an async job is
        cancelled, a sync job sees `Run.fenced` (`ensure_held()` raises `Fenced`), and the run
        is recorded failed (``timeout: ran longer than ...``), its lease over;
        retries: how many times a run that raised is tried again, on any instance, as the next
        attempt (L12; default 0, at most 100; a timeout is not retried): attempt n retries
        while n <= retries and the retry would start before the job's next slot, and the claims
        allow ``attempts + retries`` attempts; backoff: the wait before each retry, a duration
        (``"30s"``: always that) or a mapping ``{"first": "10s", "factor": 2, "max": "10m"}``
        (the default).
        """

        def register(func: F) -> F:
            self.add_job(
                func,
                cron,
                every=every,
                offset=offset,
                name=name,
                tz=tz,
                lease=lease,
                max_late=max_late,
                overlap=overlap,
                attempts=attempts,
                heartbeat=heartbeat,
                catch_up=catch_up,
                timeout=timeout,
                retries=retries,
                backoff=backoff,
            )
            return func

        return register

    def add_job(
        self, func: Callable[..., Any], cron: str | None = None, **settings: Any
    ) -> JobSpec:
        """Like `job`, without the decorator (``add_job(f, "*/5 * * * *")``, ``add_job(f,
        every="30s")``); returns the validated job."""
        spec = make_job(
            func,
            cron=cron,
            **{
                "every": None,
                "offset": None,
                "name": None,
                "tz": "UTC",
                "lease": None,
                "max_late": None,
                "overlap": None,
                "attempts": 3,
                "heartbeat": None,
                "catch_up": None,
                "timeout": None,
                "retries": 0,
                "backoff": None,
                **settings,
            },
        )
        if spec.name in self.jobs:
            raise ConfigError(f"job {spec.name!r} is defined twice; give one of them name=...")
        if self._started:
            raise ConfigError(f"job {spec.name!r}: add jobs before the scheduler starts")
        self.jobs[spec.name] = spec
        return spec

    def _check_job(self, spec: JobSpec) -> JobSpec:
        """T3 and the overlap rule, against the store's capabilities (at start); the catch-up
        default resolved from the settings."""
        return fit_to_store(
            spec,
            self.store.capabilities,
            store_name=self.store_name,
            clock_skew_ms=self.settings.clock_skew_ms,
            catch_up=self.settings.catch_up,
        )

    # -- lifecycle ------------------------------------------------------------------------------
    def start(self) -> Awaitable[None]:
        """Check every job against the store (T3), open the store, set the jobs up
        (`SupportsJobSetup`: a conflict refuses the start with `ConfigError`), begin dispatching.

        Async code (a loop runs in this thread): ``await scheduler.start()``, on that loop.
        Sync code: ``scheduler.start()`` runs the scheduler on its own loop in a daemon thread
        and returns once started (errors raise here); `shutdown()` stops it, else interpreter
        exit does. Starting a started scheduler does nothing. Start it after ``fork()``: in the
        child of a started one, `start()`, `shutdown()` and `health()` raise `RuntimeError`.

        A store that does not answer does not fail the start (unless ``fail_fast``): the
        scheduler starts degraded, not ready (`health().ready` is False), opens the store in
        the background with backoff, and claims as soon as it answers, deciding the slots that
        fell due meanwhile (T6). Errors that retrying cannot fix (`ConfigError`: refused
        credentials, bad options) fail at once either way."""
        try:
            asyncio.get_running_loop()
        except RuntimeError:
            if self._thread is None and not self._started:
                self._thread = SchedulerThread(
                    self.instance,
                    start=self._start,
                    stop=self._stop_here,
                    exit_timeout_s=self.settings.grace_ms / 1000 + EXIT_MARGIN_S,
                )
            if self._thread is not None:
                self._thread.start()
            return STARTED
        return self._start()

    def shutdown(self, wait: bool = True, timeout: float | None = None) -> None:
        """Stop a scheduler started from sync code, with the handover of SIGTERM (`stop()`):
        stop claiming, let running jobs finish within the grace period, release the leases of
        the others. With `wait`, return once stopped and its thread ended (`TimeoutError` after
        `timeout` seconds); else return at once. Nothing to do if it is not running."""
        if self._thread is not None:
            self._thread.shutdown(wait=wait, timeout=timeout)

    async def _start(self) -> None:
        if self._started:
            return
        self.jobs = {name: self._check_job(spec) for name, spec in self.jobs.items()}
        since_ms = self.store_clock.now_ms()
        # Events are made for the running loop; a stop asked for while the store was opening
        # (a SIGTERM during start) carries over.
        self._stop = asyncio.Event()
        if self._stop_requested:
            self._stop.set()
        try:
            await open_store(
                self.store,
                self.store_name,
                start_timeout_ms=self.settings.start_timeout_ms,
                first_only=not self.settings.fail_fast,
            )
        except StoreUnavailable as exc:
            if self.settings.fail_fast:
                raise
            self.store_health.failed("open", exc)
            log.warning(
                "scheduler %s starts degraded: store %s does not answer (%s); not ready, "
                "connecting in the background",
                self.instance,
                self.store_name,
                self.store_health.last_error,
                extra={"instance": self.instance, "store": self.store_name},
            )
            await self._mark_started()
            self._connecting = asyncio.create_task(
                self._connect_later(since_ms), name="anarchon-connect"
            )
            return
        await self._mark_started()
        await self._begin(since_ms)

    async def _mark_started(self) -> None:
        """Started, if not yet ready: the probes answer from now on (``/readyz`` says 503
        until the store is open and answers)."""
        self._started = True
        self._started_at = time.time_ns() // 1_000_000
        if self.settings.health_port is not None and self._health_server is None:
            await self.serve_health(self.settings.health_port)

    async def _connect_later(self, since_ms: int) -> None:
        """Degraded start: open the store with backoff until it answers, then begin."""
        timeout_s = self.settings.claim_timeout_ms / 1000
        if not await open_when_it_answers(self.context, self._stop, timeout_s=timeout_s):
            return
        try:
            await self._begin(since_ms)
        except ConfigError as exc:
            self.store_health.last_error = redact(str(exc))
            log.error(
                "scheduler %s: %s; it stays not ready",
                self.instance,
                self.store_health.last_error,
                extra={"instance": self.instance},
            )

    async def _begin(self, since_ms: int) -> None:
        """With the store open: set the jobs up, measure the store's clock, start dispatching
        from `since_ms` (when `start()` was called)."""
        try:
            await set_up_jobs(self.store, self.jobs, store_name=self.store_name)
        except ConfigError:
            if self._owns_store:
                await self.store.close()
            self._started = False
            if self._health_server is not None:
                await self._health_server.close()
                self._health_server = None
            raise
        self._store_open = True
        await self.store_clock.measure()
        self.dispatcher.start(self.jobs, self._stop, since_ms=since_ms)
        log.info(
            "scheduler %s started with %d job(s) on %s (store clock offset %+d ms)",
            self.instance,
            len(self.jobs),
            self.store_name,
            self.store_clock.offset_ms,
            extra={"instance": self.instance, "store": self.store_name},
        )
        self.events.scheduler_started(
            scheduler=StartedScheduler(
                instance=self.instance,
                store=self.store_name,
                jobs=tuple(self.jobs),
                read_health=self.health,
            )
        )

    async def stop(self) -> None:
        """Stop claiming; let running jobs finish within the grace period; release the leases of
        those still running (L9), so backups take over at once; close the store."""
        thread = self._thread
        if thread is not None and thread.running and not thread.loop_thread.in_thread():
            await asyncio.to_thread(self.shutdown)  # started from sync code: stop it there
            return
        await self._stop_here()

    async def _stop_here(self) -> None:
        if not self._started:
            return
        self._started = False
        self._stop_requested = False
        self._stop.set()
        if self._connecting is not None:
            self._connecting.cancel()
            await asyncio.gather(self._connecting, return_exceptions=True)
            self._connecting = None
        await self.dispatcher.stop(self.settings.grace_ms)
        if self._owns_store:
            await self.store.close()
        if self._health_server is not None:
            await self._health_server.close()
            self._health_server = None
        self._started_at = None
        self._store_open = False
        log.info("scheduler %s stopped", self.instance, extra={"instance": self.instance})

    async def serve(self) -> None:
        """Start, and run until cancelled (then stop gracefully)."""
        await self._start()
        try:
            await self._stop.wait()
        finally:
            await asyncio.shield(self.stop())

    async def __aenter__(self) -> Self:
        await self._start()
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        await self.stop()

    def run(self) -> None:
        """Block until SIGINT or SIGTERM, then stop gracefully.

        It runs its own event loop: inside async code (a running loop) use ``await
        scheduler.serve()`` or ``async with scheduler:`` instead. Off the main thread it runs
        too, without signal handlers (only the main thread gets signals): stop it with
        `request_stop()` called on its loop."""
        try:
            asyncio.get_running_loop()
        except RuntimeError:
            pass
        else:
            raise RuntimeError(
                "Scheduler.run() blocks and runs its own event loop, but it was called inside a "
                "running one; in async code use `await scheduler.serve()` or "
                "`async with scheduler: ...` (FastAPI: in the lifespan)"
            )
        on_main = threading.current_thread() is threading.main_thread()

        async def main() -> None:
            loop = asyncio.get_running_loop()
            if on_main:
                for sig in (signal.SIGINT, signal.SIGTERM):
                    loop.add_signal_handler(sig, self.request_stop)
            await self.serve()

        asyncio.run(main())

    def request_stop(self) -> None:
        """Ask `serve()` / `run()` to stop gracefully (call it on the scheduler's loop)."""
        self._stop_requested = True
        self._stop.set()

    # -- health ---------------------------------------------------------------------------------
    def health(self) -> Health:
        """A snapshot: store reachability, clock offset, running jobs, the last claim per job.
        Callable from any thread."""
        if self._thread is not None:
            snapshot = self._thread.call(self._health)  # read on the scheduler's own loop
            if snapshot is not None:
                return snapshot
        return self._health()

    def _health(self) -> Health:
        return health_snapshot(
            instance=self.instance,
            started=self._started,
            started_at=self._started_at,
            store_open=self._store_open,
            store_health=self.store_health,
            store_clock=self.store_clock,
            executions=self.executions,
            last_claims=self.last_claims,
            paused=self.dispatcher.pauses.paused,
            fleet=self.fleet,
            store_notices=getattr(self.store, "notices", ()),
        )

    async def serve_health(self, port: int = 0, host: str = "0.0.0.0") -> HealthServer:
        """Serve ``GET /healthz`` (liveness) and ``GET /readyz`` (readiness: started and the store
        answers; 503 otherwise) with `health()` as JSON, on this loop, until `stop()`. ``port=0``
        picks a free port (``server.port``). `health_port=` / ``ANARCHON_HEALTH_PORT`` does this
        at start."""
        if self._health_server is not None:
            raise ConfigError(
                f"the health endpoint already runs on port {self._health_server.port}"
            )
        server = HealthServer(self.health, host=host, port=port)
        await server.start()
        self._health_server = server
        return server
