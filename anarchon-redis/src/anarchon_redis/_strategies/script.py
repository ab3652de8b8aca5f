"""``strategy=script``: a Lua script (``_scripts/window.lua``) scans the job's claim stream for
the slot among the entries of the last `window_ms` (by Redis TIME), appends the claim if there is
none, and answers who holds the slot. Like idmp, on servers without it (Valkey, Redis before
8.6). A slot older than the window is `late`: the store no longer knows (T3). `claim_many` runs
the same script for up to `BATCH` jobs per call.

A skip (S1) is appended as a claim would be, with the field ``skip`` (the reason): `skipped` for
the writer and for every claim that finds the entry. A skip is appended for a slot older than
max_late too (within the window): it lets nobody run the slot and records why it did not run.

P1 and X1 (``pause=True``, ``trigger=True``): the job's pause hash ``{prefix:job}:pause`` is the
script's second key, read in the same call when no entry holds the slot yet: a paused job's slot
is appended as a skip (``paused``, ``paused: <reason>``) whatever the request says. A triggered
slot (any millisecond, never a whole second) is claimed like a scheduled one: the scan does not
assume slots arrive in order (each entry's ``max``), so an ad-hoc slot claimed after a later
scheduled one is still found, and it is remembered for one window like any claim.

C5: a claim is found for one window after it is appended, so the script refuses (by Redis
``TIME``, the clock lateness is judged by) a claim appended earlier than
``slot + max_late - window_ms``: `anarchon.backend.early_claim_error` is raised, and nothing is
written. Without it, a claim made long before its slot would be out of the next claim's scan
and the slot won twice."""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING

from anarchon.backend import Claim, ClaimRequest, Outcome, StoreCorrupt

from .._client import Script
from .._keys import JobKeys
from .._wire import bulk
from .streams import StreamStrategy, answered, refuse_early, skip_tail

if TYPE_CHECKING:
    from .._connection import Link
    from .._options import RedisOptions

__all__ = ["WINDOW", "ScriptStrategy"]

WINDOW = Script("window.lua", claims=True, entry="window")


class ScriptStrategy(StreamStrategy):
    """No-lease: a windowed scan and append in one script."""

    name = "script"
    keys_per_job = 2
    pause = True
    trigger = True

    def __init__(self, options: RedisOptions) -> None:
        super().__init__(options)
        self._option = bulk(f"claim {self.options.script_window_ms}")

    @property
    def remembers_ms(self) -> int | None:
        return self.options.script_window_ms

    async def setup(self, link: Link) -> None:
        self.functions = await WINDOW.load_function(link.client)

    def _script_keys(self, keys: JobKeys) -> list[str]:
        return [keys.claims, keys.pause]

    def _ask(self, request: ClaimRequest) -> str:
        return f"{request.slot} {request.token} {request.max_late_ms} {skip_tail(request)}"

    async def claim(self, link: Link, request: ClaimRequest) -> Claim:
        return await self._decided_one(link, WINDOW, self._option, request, self._decide)

    async def claim_many(self, link: Link, requests: Sequence[ClaimRequest]) -> list[Claim]:
        if not requests:
            return []
        return await self._decided(link, WINDOW, self._option, requests, self._decide)

    def _decide(self, request: ClaimRequest, answer: str) -> Claim:
        """The script's answer ``<state> <now>[ <token> <holder>...]`` as a `Claim`; ``early``
        raises `ConfigError` (C5)."""
        state, now_s, rest = (*answer.split(" ", 2), "")[:3]
        claim = answered(request, state, rest)
        if claim is not None:
            return claim
        if state == "early":
            refuse_early(request, now_s, self.options.script_window_ms)
        try:
            age = int(now_s) - request.slot
        except ValueError:
            age = None
        if age is None or state not in ("forgotten", "late"):
            raise StoreCorrupt(
                f"Redis answered {answer!r} to the claim script for job {request.job!r}"
            )
        if state == "forgotten":
            return Claim(
                outcome=Outcome.LATE,
                reason=(
                    f"forgotten: slot is {age} ms old, older than "
                    f"window_ms={self.options.script_window_ms}"
                ),
            )
        return Claim(
            outcome=Outcome.LATE,
            reason=f"late: slot is {age} ms old, max_late is {request.max_late_ms} ms",
        )
