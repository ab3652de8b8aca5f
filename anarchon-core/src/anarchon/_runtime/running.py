"""`Running`: the runs this instance won, from their start to the shutdown. Each executes in
its own task (`Execution`); while any runs on a lease store with a clock, that clock is watched
for steps (F1); at shutdown they get the grace period, then their leases are released (L9)."""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable, Coroutine
from typing import Any

from .._claims import Claim, ClaimRequest
from .claimer import TRANSPORT_ERRORS
from .clock_watch import ClockWatch
from .context import RuntimeContext
from .execution import Execution
from .jobs import JobSpec

__all__ = ["FENCED_EXIT_WAIT_S", "Running"]

log = logging.getLogger("anarchon.scheduler")

FENCED_EXIT_WAIT_S = 5.0
"""At shutdown, after the grace period, how long runs fenced by the shutdown get to end (a sync
job must notice `run.fenced` / `ensure_held()` within it) before `stop()` goes on."""

Spawn = Callable[[Coroutine[Any, Any, Any], str], "asyncio.Task[Any]"]
OnRetry = Callable[[JobSpec, int, int], None]


class Running:
    """The executions of one dispatcher. `spawn` starts a background task of the dispatcher
    (one whose failure is reported, and which shutdown cancels)."""

    def __init__(
        self, context: RuntimeContext, spawn: Spawn, on_retry: OnRetry | None = None
    ) -> None:
        """`on_retry(spec, slot, delay_ms)`: a run of `spec` at `slot` failed and waits
        `delay_ms` for its retry (L12), which this instance watches for like a backup (L10)."""
        self.context = context
        self._spawn = spawn
        self._on_retry = on_retry
        self.executions: set[Execution] = set()
        """The runs executing here now."""
        self.tasks: set[asyncio.Task[Any]] = set()
        """Their tasks."""
        self._watch: asyncio.Task[Any] | None = None

    def start(
        self, spec: JobSpec, request: ClaimRequest, claim: Claim, sent_at: float
    ) -> Execution:
        """Start executing the run `claim` won."""
        execution = Execution(
            self.context,
            spec=spec,
            request=request,
            claim=claim,
            sent_at=sent_at,
            on_retry=self._on_retry,
        )
        self.executions.add(execution)
        self._watch_clock()
        task = asyncio.create_task(execution(), name=f"anarchon-run-{spec.name}-{request.slot}")
        self.tasks.add(task)

        def finished(t: asyncio.Task[Any]) -> None:
            self.tasks.discard(t)
            self.executions.discard(execution)

        task.add_done_callback(finished)
        return execution

    async def release_unstarted(self, request: ClaimRequest) -> None:
        """A run won while stopping: release it (L9) so that it neither runs nor holds its lease
        until it runs out."""
        store = self.context.lease_store
        if store is None:
            return
        try:
            await asyncio.wait_for(store.release(request.job, request.slot, request.token), 5)
        except (*TRANSPORT_ERRORS, asyncio.TimeoutError) as exc:
            log.warning(
                "run %s@%s won while stopping could not be released (%s); a backup takes it "
                "over when the lease runs out",
                request.job,
                request.slot,
                exc,
                extra={"job": request.job, "slot": request.slot},
            )
            return
        log.info(
            "run %s@%s won while stopping: released for a backup",
            request.job,
            request.slot,
            extra={"job": request.job, "slot": request.slot},
        )

    async def stop(self, grace_ms: int) -> None:
        """Let the running jobs finish within `grace_ms`; release the leases of those still
        running (L9), so backups take over at once, and give them `FENCED_EXIT_WAIT_S` to end."""
        pending = [e.done.wait() for e in self.executions]
        if not pending:
            return
        log.info("waiting up to %d ms for %d running job(s)", grace_ms, len(pending))
        await asyncio.wait([asyncio.ensure_future(p) for p in pending], timeout=grace_ms / 1000)
        leftover = [e for e in self.executions if not e.done.is_set()]
        for execution in leftover:
            await execution.abandon()
        if leftover:
            # Fenced now: async jobs are cancelled; a sync job sees run.fenced at its next
            # check and gets this long to return through its except/finally, before the
            # process may exit under its thread.
            await asyncio.wait(
                [asyncio.ensure_future(e.done.wait()) for e in leftover],
                timeout=FENCED_EXIT_WAIT_S,
            )

    def _watch_clock(self) -> None:
        """While runs execute on a lease store with a clock, watch that clock for steps (F1)."""
        store = self.context.lease_store
        if store is None or not store.capabilities.store_clock:
            return
        if self._watch is not None and not self._watch.done():
            return
        watch = ClockWatch(
            store.now_ms, self.executions, self.context.clock.local, on_step=self._clock_stepped
        )
        self._watch = self._spawn(watch.run(), "anarchon-clock-watch")

    def _clock_stepped(self, step_ms: int) -> None:
        """Fire slots by the store's new time too (T2)."""
        self._spawn(self.context.clock.measure(), "anarchon-clock")
