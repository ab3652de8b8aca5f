"""`StoreHealth`: whether the store answers, and which jobs' data it answers damaged. Outages are
logged once, at their start and their end, not once per call (DESIGN section 11)."""

from __future__ import annotations

import logging
import time
from collections.abc import Sequence

from .._errors import StoreCorrupt
from .._urls import redact
from ..plugins import PluginManager

__all__ = ["StoreHealth"]

log = logging.getLogger("anarchon.store")


class StoreHealth:
    """Tracks whether the store answers; logs the start and the end of each outage once. Tracks
    the jobs whose claims the store answers with data anarchon cannot read (`damaged`)."""

    def __init__(self, store_name: str, events: PluginManager) -> None:
        self.store_name = store_name
        self.events = events
        self.down_since: float | None = None
        self.last_error: str | None = None
        self.last_ok: float | None = None
        self.damaged: dict[str, str] = {}
        """By job: the error (redacted) of its last claim, which raised `StoreCorrupt`. Each
        stays until a claim of its job succeeds; the instance is not ready while any does."""

    def corrupt(self, operation: str, jobs: Sequence[str], error: StoreCorrupt) -> None:
        """Claims of `jobs` raised `StoreCorrupt`: logged at ERROR when a job is newly damaged
        or its error changed (else DEBUG), and told to the observers every time."""
        text = redact(f"{type(error).__name__}: {error}")
        self.last_error = text
        changed = [job for job in jobs if self.damaged.get(job) != text]
        self.damaged.update(dict.fromkeys(jobs, text))
        log.log(
            logging.ERROR if changed else logging.DEBUG,
            "store %s: %s of job(s) %s failed: %s; this instance is not ready until a claim of "
            "them succeeds (repair the data the error names)",
            self.store_name,
            operation,
            ", ".join(jobs),
            text,
            extra={"store": self.store_name, "operation": operation, "jobs": list(jobs)},
        )
        self.events.store_error(store=self.store_name, operation=operation, error=error)

    def answered(self, jobs: Sequence[str]) -> None:
        """Claims of `jobs` succeeded: those that were damaged are no longer."""
        back = [job for job in jobs if self.damaged.pop(job, None) is not None]
        if back:
            log.info(
                "store %s answers claims of job(s) %s again",
                self.store_name,
                ", ".join(back),
                extra={"store": self.store_name, "jobs": back},
            )

    def failed(self, operation: str, error: BaseException) -> None:
        self.last_error = redact(f"{type(error).__name__}: {error}")
        if self.down_since is None:
            self.down_since = time.monotonic()
            log.warning(
                "store %s is unreachable (%s failed: %s); retrying, claims keep their tokens",
                self.store_name,
                operation,
                self.last_error,
                extra={"store": self.store_name, "operation": operation},
            )
            self.events.store_error(store=self.store_name, operation=operation, error=error)

    def ok(self) -> None:
        self.last_ok = time.monotonic()
        if self.down_since is not None:
            log.info(
                "store %s is reachable again after %.1f s",
                self.store_name,
                self.last_ok - self.down_since,
                extra={"store": self.store_name},
            )
            self.down_since = None
