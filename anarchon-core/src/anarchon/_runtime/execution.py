"""Executing a won run: heartbeats, self-fencing on the monotonic clock (F1), the job's timeout,
finish, release. The job's body itself runs in `bodies`."""

from __future__ import annotations

import asyncio
import functools
import logging
import time
import traceback
from collections.abc import Callable
from typing import Any

from .._claims import Claim, ClaimRequest
from .._retries import try_entry
from .._runs import RunStatus
from ..abc import SupportsRetry
from .bodies import guarded, run_in_thread
from .claimer import TRANSPORT_ERRORS
from .context import RuntimeContext
from .handle import Run
from .jobs import JobSpec, call_job
from .retrying import keep_for_retry, retry_delay_ms

__all__ = ["Execution", "fence_margin_s", "show_duration"]

log = logging.getLogger("anarchon.run")

MAX_ERROR_CHARS = 4000


def fence_margin_s(lease_ms: int) -> float:
    """How long before the local lease deadline a runner fences itself (F1): a tenth of the lease,
    between 20 ms and 2 s, covering event-loop delays and the store's processing time."""
    return min(max(lease_ms / 10_000, 0.02), 2.0)


def show_duration(ms: int) -> str:
    """`ms` as a duration string that `to_ms` reads back: 600000 -> ``10m``, 90500 ->
    ``1m30s500ms``; the form logs and error texts show a job's timeout in."""
    parts = []
    for unit, size in (("d", 86_400_000), ("h", 3_600_000), ("m", 60_000), ("s", 1000), ("ms", 1)):
        count, ms = divmod(ms, size)
        if count:
            parts.append(f"{count}{unit}")
    return "".join(parts) or "0ms"


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
        on_retry: Callable[[JobSpec, int, int], None] | None = None,
    ) -> None:
        """`claim` won `request` (sent at `sent_at`, monotonic seconds): the lease counts from
        then (F1). `on_retry(spec, slot, delay_ms)` is called once the store keeps the run for
        its retry (L12), to watch for it here too."""
        self.spec = spec
        self.context = context
        self.on_retry = on_retry
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
        self._heartbeat_task: asyncio.Task[None] | None = None
        self._abandoned = False
        self._timed_out: asyncio.Future[None] | None = None
        """Resolved when the job's timeout passes before the job ends."""
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
            self._job = asyncio.ensure_future(guarded(call_job(spec, run), run))
        else:
            self._job = run_in_thread(spec.name, functools.partial(call_job, spec), run)
        heartbeat = asyncio.create_task(self._heartbeat()) if self.store else None
        self._heartbeat_task = heartbeat
        status, error = RunStatus.SUCCEEDED, None
        raised = False
        try:
            if await self._wait_for_job():
                assert spec.timeout_ms is not None
                status = RunStatus.FAILED
                error = f"timeout: ran longer than {show_duration(spec.timeout_ms)}"
            else:
                self._job.result()
        except asyncio.CancelledError:
            if not self._job.cancelled():
                raise  # the scheduler itself is being cancelled
            status, error = RunStatus.FAILED, f"cancelled: {run.fence_reason or 'shutdown'}"
        except BaseException as exc:
            raised = isinstance(exc, Exception)
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
        retry_ms = self._retry_delay_ms() if raised and error is not None else None
        if retry_ms is not None and error is not None:
            recorded = await self._retry(error, retry_ms)
        else:
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
        if retry_ms is not None and recorded:
            log.info(
                "run %s@%s attempt %s is tried again in %d ms (retry %d of %d)",
                run.job,
                run.slot,
                run.attempt,
                retry_ms,
                run.attempt,
                spec.retries,
                extra=self._fields(retry_ms=retry_ms),
            )
            if self.on_retry is not None:
                self.on_retry(spec, run.slot, retry_ms)
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

    async def _wait_for_job(self) -> bool:
        """Wait for the job to end, or for its timeout to pass: True if the timeout came first
        (the job is fenced, and goes on until it notices, or returns)."""
        job = self._job
        assert job is not None
        timeout_ms = self.spec.timeout_ms
        if timeout_ms is None:
            await asyncio.wait([job])
            return False
        loop = asyncio.get_running_loop()
        self._timed_out = timed_out = loop.create_future()
        timer = loop.call_later(timeout_ms / 1000, self._time_out)
        try:
            await asyncio.wait([job, timed_out], return_when=asyncio.FIRST_COMPLETED)
        finally:
            timer.cancel()
        return timed_out.done()

    def _time_out(self) -> None:
        """The job's timeout passed: stop renewing the lease, fence the run (an async job is
        cancelled; a sync one sees `Run.fenced`), and stop waiting for the job, so the run is
        recorded failed now and its lease ends with that (no backup takes a timed-out run
        over). The job's late end is logged, not recorded."""
        job, timed_out, timeout_ms = self._job, self._timed_out, self.spec.timeout_ms
        assert job is not None and timed_out is not None and timeout_ms is not None
        if job.done() or timed_out.done() or self._abandoned:
            return
        if self._heartbeat_task is not None:
            self._heartbeat_task.cancel()
        shown = show_duration(timeout_ms)
        self._fenced(f"timed out after {shown}", quiet=True)
        run = self.run
        if self.spec.is_async:
            what = "cancelled"
        else:
            what = (
                "its thread goes on until the function returns (run.fenced is True, "
                "run.ensure_held() raises Fenced)"
            )
        recorded = (
            "recording it failed"
            if self.store is not None
            else "the store keeps no run records (no leases), so nothing is recorded"
        )
        log.warning(
            "run %s@%s attempt %s timed out after %s: %s; %s",
            run.job,
            run.slot,
            run.attempt,
            shown,
            what,
            recorded,
            extra=self._fields(reason="timeout", timeout_ms=timeout_ms),
        )
        job.add_done_callback(functools.partial(self._ended_after_timeout, time.monotonic()))
        timed_out.set_result(None)

    def _ended_after_timeout(self, timed_out_at: float, job: asyncio.Future[Any]) -> None:
        """A timed-out job has ended: say so (a sync job's thread ran on till now); its result
        is not recorded, and an exception of it is consumed here, not left unretrieved."""
        if job.cancelled():
            ended = "was cancelled"
        elif (exc := job.exception()) is not None:
            ended = f"raised {type(exc).__name__}"
        else:
            ended = "returned"
        run = self.run
        log.log(
            logging.DEBUG if self.spec.is_async else logging.INFO,
            "run %s@%s attempt %s, which timed out, %s %.0f ms after its timeout; not recorded",
            run.job,
            run.slot,
            run.attempt,
            ended,
            (time.monotonic() - timed_out_at) * 1000,
            extra=self._fields(),
        )

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

    def _retry_delay_ms(self) -> int | None:
        """L12: the wait before this run's next try, if it gets one here (the store keeps runs
        for retries, the job has retries left, the next try starts before its next slot)."""
        store = self.store
        if self._abandoned or self.run.fenced or store is None or not self.spec.retries:
            return None
        if not (store.capabilities.retries and isinstance(store, SupportsRetry)):
            return None
        return retry_delay_ms(
            self.spec,
            slot=self.run.slot,
            attempt=self.run.attempt,
            now_ms=self.context.clock.now_ms(),
        )

    async def _retry(self, error: str, delay_ms: int) -> bool:
        """L12: record this try failed in the run's try log and have the store keep the run
        running until the retry, for whichever instance claims or checks it then."""
        store: object = self.store  # a LeaseStore that also implements SupportsRetry
        assert isinstance(store, SupportsRetry)
        return await keep_for_retry(store, self.run, error, delay_ms, self.health)

    async def _finish(self, status: RunStatus, error: str | None) -> bool:
        if self.store is None:
            return True
        store, run = self.store, self.run
        if error is not None and self.spec.retries and status is RunStatus.FAILED:
            error = try_entry(run.attempt, error)  # the last entry of the run's try log
        while True:
            try:
                recorded = await store.finish(run.job, run.slot, run.token, status, error)
            except TRANSPORT_ERRORS as exc:
                self.health.failed("finish", exc)
                if run.fenced and not self._still_leased():
                    return False
                await asyncio.sleep(0.1)
            else:
                self.health.ok()
                return recorded

    def _still_leased(self) -> bool:
        """A run fenced by its timeout still holds its lease until the local deadline: its
        finish is worth retrying until then, so that no backup takes the run over."""
        deadline = self.run.deadline
        timed_out = self._timed_out is not None and self._timed_out.done()
        return timed_out and deadline is not None and time.monotonic() < deadline

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

    def _fenced(self, reason: str, *, quiet: bool = False) -> None:
        """Fence the run: log it (unless `quiet`: the caller logs), tell the plugins, cancel an
        async job."""
        run = self.run
        if not run._fence(reason):
            return
        if not quiet:
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
