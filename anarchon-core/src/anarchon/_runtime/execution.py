"""Executing a won run: heartbeats, self-fencing on the monotonic clock (F1), finish, release."""

from __future__ import annotations

import asyncio
import functools
import logging
import threading
import time
import traceback
from collections.abc import Callable, Coroutine, Generator
from typing import Any

from .._claims import Claim, ClaimRequest
from .._runs import RunStatus
from .claimer import TRANSPORT_ERRORS
from .context import RuntimeContext
from .handle import Run
from .jobs import JobSpec, call_job

__all__ = ["Execution", "fence_margin_s"]

log = logging.getLogger("anarchon.run")

MAX_ERROR_CHARS = 4000


def fence_margin_s(lease_ms: int) -> float:
    """How long before the local lease deadline a runner fences itself (F1): a tenth of the lease,
    between 20 ms and 2 s, covering event-loop delays and the store's processing time."""
    return min(max(lease_ms / 10_000, 0.02), 2.0)


def _run_in_thread(name: str, func: Callable[[Run], Any], run: Run) -> asyncio.Future[Any]:
    """Run a sync job in its own daemon thread (never on the loop, never starving a pool)."""
    loop = asyncio.get_running_loop()
    future: asyncio.Future[Any] = loop.create_future()

    def resolve(ok: bool, value: Any) -> None:
        if future.done():
            return
        if ok:
            future.set_result(value)
        else:
            future.set_exception(value)

    def target() -> None:
        try:
            result = func(run)
        except BaseException as exc:  # noqa: BLE001 - handed to the loop, never lost
            loop.call_soon_threadsafe(resolve, False, exc)
        else:
            loop.call_soon_threadsafe(resolve, True, result)

    threading.Thread(target=target, name=f"anarchon-job-{name}", daemon=True).start()
    return future


class _Guarded:
    """An async job's coroutine, stepped by hand so that each step first checks the lease (F1).

    After a pause longer than the lease (SIGSTOP, a stalled host), the job's own timer may be
    ready before the heartbeat task that would fence it; asyncio could then resume the job for
    one more step although the run is already fenced. Here every resumption of the job is
    preceded by a look at `Run.fenced` (the monotonic deadline too): a fenced run gets
    `CancelledError` thrown in where it waits, so its ``except``/``finally`` run and no step of
    its work does."""

    def __init__(self, coro: Coroutine[Any, Any, Any], run: Run) -> None:
        self.coro = coro
        self.run = run

    def __await__(self) -> Generator[Any, Any, Any]:
        coro, run = self.coro, self.run
        send: Any = None
        error: BaseException | None = None
        cancelled = False  # once: the job's own cleanup may await afterwards
        while True:
            if not cancelled and run.fenced:
                cancelled = True
                error = asyncio.CancelledError(f"fenced: {run.fence_reason}")
            elif isinstance(error, asyncio.CancelledError):
                cancelled = True
            try:
                waiting = coro.send(send) if error is None else coro.throw(error)
            except StopIteration as stop:
                return stop.value
            try:
                send, error = (yield waiting), None
            except BaseException as exc:  # noqa: BLE001 - passed on to the job, as asyncio does
                send, error = None, exc


async def _guarded(coro: Coroutine[Any, Any, Any], run: Run) -> Any:
    return await _Guarded(coro, run)


class Execution:
    """One run this instance won, from start to finish."""

    def __init__(
        self,
        context: RuntimeContext,
        *,
        spec: JobSpec,
        request: ClaimRequest,
        claim: Claim,
        sent_at: float,
    ) -> None:
        """`claim` won `request` (sent at `sent_at`, monotonic seconds): the lease counts from
        then (F1)."""
        self.spec = spec
        self.request = request
        self.claim = claim
        self.store = context.lease_store
        self.instance = context.instance
        self.health = context.health
        self.events = context.events
        self.margin = fence_margin_s(spec.lease_ms)
        deadline = sent_at + spec.lease_ms / 1000 - self.margin if self.store else None
        self.run = Run(
            job=request.job,
            slot=request.slot,
            attempt=claim.attempt,
            token=request.token,
            deadline=deadline,
        )
        self._job: asyncio.Future[Any] | None = None
        self._abandoned = False
        self.started_at = time.time_ns() // 1_000_000
        """When this instance won the run, epoch ms (local clock)."""
        self.done = asyncio.Event()

    async def __call__(self) -> None:
        spec, run = self.spec, self.run
        started = time.monotonic()
        self.events.run_started(
            job=run.job, slot=run.slot, attempt=run.attempt, instance=self.instance, token=run.token
        )
        log.info(
            "run %s@%s attempt %s started",
            run.job,
            run.slot,
            run.attempt,
            extra=self._fields(),
        )
        if spec.is_async:
            self._job = asyncio.ensure_future(_guarded(call_job(spec, run), run))
        else:
            self._job = _run_in_thread(spec.name, functools.partial(call_job, spec), run)
        heartbeat = asyncio.create_task(self._heartbeat()) if self.store else None
        status, error = RunStatus.SUCCEEDED, None
        try:
            await asyncio.shield(self._job)
        except asyncio.CancelledError:
            if not self._job.cancelled():
                raise  # the scheduler itself is being cancelled
            status, error = RunStatus.FAILED, f"cancelled: {run.fence_reason or 'shutdown'}"
        except BaseException as exc:
            status = RunStatus.FAILED
            error = "".join(traceback.format_exception_only(type(exc), exc)).strip()
            error = error[:MAX_ERROR_CHARS]
            log.error(
                "run %s@%s attempt %s failed: %s",
                run.job,
                run.slot,
                run.attempt,
                error,
                exc_info=exc,
                extra=self._fields(),
            )
        finally:
            if heartbeat is not None:
                heartbeat.cancel()
        recorded = await self._finish(status, error) if not self._abandoned else False
        duration_ms = (time.monotonic() - started) * 1000
        if self.store and not recorded and not self._abandoned:
            self._fenced("the store refused the finish: another instance holds the run")
            log.warning(
                "run %s@%s attempt %s finished %s but was fenced; its result is not recorded",
                run.job,
                run.slot,
                run.attempt,
                status,
                extra=self._fields(),
            )
        log.info(
            "run %s@%s attempt %s %s in %.0f ms",
            run.job,
            run.slot,
            run.attempt,
            status,
            duration_ms,
            extra=self._fields(
                status=str(status),
                duration_ms=round(duration_ms, 3),
                error=error,
                recorded=recorded or self.store is None,
            ),
        )
        self.events.run_finished(
            job=run.job,
            slot=run.slot,
            attempt=run.attempt,
            instance=self.instance,
            status=status,
            error=error,
            duration_ms=duration_ms,
            recorded=recorded or self.store is None,
        )
        self.done.set()

    def _fields(self, **more: object) -> dict[str, object]:
        """The structured fields of every run log record (`extra=`)."""
        run = self.run
        return {
            "job": run.job,
            "slot": run.slot,
            "attempt": run.attempt,
            "instance": self.instance,
            **more,
        }

    async def _finish(self, status: RunStatus, error: str | None) -> bool:
        if self.store is None:
            return True
        store, run = self.store, self.run
        while True:
            try:
                recorded = await store.finish(run.job, run.slot, run.token, status, error)
            except TRANSPORT_ERRORS as exc:
                self.health.failed("finish", exc)
                if run.fenced:
                    return False
                await asyncio.sleep(0.1)
            else:
                self.health.ok()
                return recorded

    async def _heartbeat(self) -> None:
        """Renew every heartbeat; fence before the store could grant the next attempt (F1)."""
        assert self.store is not None
        store, run, spec = self.store, self.run, self.spec
        interval = spec.heartbeat_ms / 1000
        next_renew = time.monotonic() + interval
        while True:
            deadline = run._deadline
            assert deadline is not None
            now = time.monotonic()
            if now >= deadline:
                self._fenced("no renew succeeded before the local lease deadline")
                return
            await asyncio.sleep(max(0.0, min(next_renew, deadline) - now))
            if time.monotonic() >= deadline:
                continue
            sent = time.monotonic()
            try:
                renewed = await asyncio.wait_for(
                    store.renew(run.job, run.slot, run.token, spec.lease_ms),
                    max(0.001, deadline - sent),
                )
            except TRANSPORT_ERRORS as exc:
                self.health.failed("renew", exc)
                next_renew = time.monotonic() + min(interval, 0.25)
                continue
            self.health.ok()
            if not renewed:
                self._fenced("the store refused the renew: another instance took the run over")
                return
            run._extend(sent + spec.lease_ms / 1000 - self.margin)
            next_renew = sent + interval

    def _fenced(self, reason: str) -> None:
        run = self.run
        if not run._fence(reason):
            return
        log.warning(
            "run %s@%s attempt %s fenced: %s",
            run.job,
            run.slot,
            run.attempt,
            reason,
            extra=self._fields(reason=reason),
        )
        self.events.run_fenced(
            job=run.job, slot=run.slot, attempt=run.attempt, instance=self.instance, reason=reason
        )
        if self._job is not None and self.spec.is_async:
            self._job.cancel()

    def store_clock_stepped(self, step_ms: int) -> None:
        """The store's clock stepped forward by `step_ms`: it ends the lease that much earlier
        than counted here. Shorten the local deadline; fence at once if it has passed."""
        run = self.run
        if self.store is None or run.fenced:
            return
        if run._shorten(step_ms / 1000):
            self._fenced(
                f"the store's clock stepped forward by {step_ms} ms, so its view of the lease "
                "ended before this instance's"
            )

    async def abandon(self) -> None:
        """Shutdown past the grace period: release the lease (L9) so a backup takes over at once,
        then fence and cancel the job."""
        self._abandoned = True
        run = self.run
        if self.store is not None:
            try:
                await asyncio.wait_for(self.store.release(run.job, run.slot, run.token), 5)
            except (*TRANSPORT_ERRORS, asyncio.TimeoutError) as exc:
                log.warning(
                    "could not release %s@%s on shutdown (%s); a backup takes over when the lease "
                    "runs out",
                    run.job,
                    run.slot,
                    exc,
                )
        self._fenced("this instance is shutting down; the lease was released")
