"""The hooks a plugin can implement. Each is documented in the docs' plugin reference.

Event hooks are called by the runtime after the fact; a plugin that raises is logged and ignored, it
never changes a claim or stops the scheduler.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from ._markers import hookspec

if TYPE_CHECKING:
    from .._claims import Claim, ClaimRequest
    from .._runs import RunStatus
    from ._registry import BackendRegistry
    from ._started import StartedScheduler


@hookspec
def anarchon_register_backends(registry: BackendRegistry) -> None:
    """Add backends: ``registry.add(scheme, "module:Class", description)``.

    Registration is by string so that installed but unused drivers are never imported.
    """


@hookspec
def anarchon_claim_decided(
    store: str, request: ClaimRequest, claim: Claim, latency_ms: float
) -> None:
    """A claim was decided, whatever the outcome. `store` is the redacted store URL."""


@hookspec
def anarchon_run_started(job: str, slot: int, attempt: int, instance: str, token: str) -> None:
    """This instance won a run and starts the job."""


@hookspec
def anarchon_run_finished(
    job: str,
    slot: int,
    attempt: int,
    instance: str,
    status: RunStatus,
    error: str | None,
    duration_ms: float,
    recorded: bool,
) -> None:
    """The job returned or raised. `recorded` is False when the store refused the finish (fenced)."""


@hookspec
def anarchon_run_fenced(job: str, slot: int, attempt: int, instance: str, reason: str) -> None:
    """This instance lost its lease on a run it was executing (F1)."""


@hookspec
def anarchon_store_error(store: str, operation: str, error: BaseException) -> None:
    """A store call failed (`operation` is ``claim``, ``renew``, ...). Called once per outage."""


@hookspec
def anarchon_fleet_slot(
    store: str, instance: str, job: str, slot: int, role: str, won: bool
) -> None:
    """This instance's part in a (job, slot) on a store with a member list (DESIGN section 12):
    `role` is ``contender`` (it claimed at the slot), ``fallback`` (not a contender: as the
    slot's watcher, or silent after its contenders and watcher left, it claimed the slot later,
    found it undecided and decided it) or ``silent`` (it claimed later and found the slot
    decided). `won`: it won the run."""


@hookspec
def anarchon_scheduler_started(scheduler: StartedScheduler) -> None:
    """A scheduler opened its store and starts dispatching; observers that serve something
    (a metrics port) start it here. `scheduler` is a read-only view (instance, redacted store
    URL, job names); `scheduler.health()` is readable from now on."""
