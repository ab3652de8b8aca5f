"""``strategy=msg-id`` (the default): every instance publishes the claim of (job, slot) to the
job's subject with the same ``Nats-Msg-Id: <job>:<slot>``. The stream stores the first and
answers the others, within its duplicate window, with a duplicate acknowledgement carrying the
stored message's sequence, which is read back and its token compared (C2)."""

from __future__ import annotations

from anarchon import ClaimRequest

from .base import Strategy

__all__ = ["MsgId"]

MSG_ID = "Nats-Msg-Id"


class MsgId(Strategy):
    """De-duplication by message id: the stream remembers a run for `duplicate_window_ms`."""

    name = "msg-id"

    @property
    def pattern(self) -> str:
        return f"{self.prefix}.*.claims"

    def subject(self, job: str, slot: int) -> str:
        return f"{self.prefix}.{job}.claims"

    def job_subjects(self, job: str) -> str:
        return f"{self.prefix}.{job}.claims"

    def headers(self, request: ClaimRequest) -> dict[str, str]:
        return {MSG_ID: f"{request.job}:{request.slot}"}

    @property
    def remembers_ms(self) -> int:
        return self.options.duplicate_window_ms

    @property
    def duplicate_window_ms(self) -> int:
        return self.options.duplicate_window_ms
