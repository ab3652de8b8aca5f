"""``strategy=expected-seq``: the claim goes to the slot's own subject with
``Nats-Expected-Last-Subject-Sequence: 0``, which only the first publish passes; a refusal
(error 10071) reads the subject's message back and compares tokens (C2). The stream remembers a
run as long as it keeps the message (``max_age_ms``)."""

from __future__ import annotations

from typing import TYPE_CHECKING

from anarchon import ClaimRequest

from .base import Strategy

if TYPE_CHECKING:
    from nats.js.errors import APIError

__all__ = ["ExpectedSeq"]

ERR_WRONG_LAST_SEQUENCE = 10071
"""The slot's subject already holds a message."""
_FIRST_ON_SUBJECT = {"Nats-Expected-Last-Subject-Sequence": "0"}
"""The header of every publish (nats-py does not change it)."""


class ExpectedSeq(Strategy):
    """One subject per run, guarded by its expected last sequence."""

    name = "expected-seq"
    per_slot = True

    @property
    def pattern(self) -> str:
        return f"{self.prefix}.*.slot.*"

    def subject(self, job: str, slot: int) -> str:
        return f"{self.prefix}.{job}.slot.{slot}"

    def job_subjects(self, job: str) -> str:
        return f"{self.prefix}.{job}.slot.*"

    def slot_of(self, subject: str) -> int | None:
        last = subject.rsplit(".", 1)[-1]
        if not (last.isascii() and last.isdigit()) or len(last) > 19:
            return None
        return int(last)

    def headers(self, request: ClaimRequest) -> dict[str, str]:
        return _FIRST_ON_SUBJECT

    def taken(self, exc: APIError) -> bool:
        return exc.err_code == ERR_WRONG_LAST_SEQUENCE

    @property
    def remembers_ms(self) -> int:
        return self.options.max_age_ms
