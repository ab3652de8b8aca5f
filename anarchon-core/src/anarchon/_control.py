"""The values of control through the store: a job's pause (rule P1) and a triggered run (X1).

There is no leader to tell, so operators act on the store: a pause is a record that the claim
itself reads in its atomic step; a trigger is a record every instance polls for and claims like
any slot. Stores offer them through `anarchon.abc.SupportsPause` and `SupportsTrigger`, and say
so in `Capabilities.pause` and `Capabilities.trigger`."""

from __future__ import annotations

import attrs

from ._claims import MAX_SLOT_MS
from ._errors import ConfigError
from ._names import check_name, shown

__all__ = [
    "MAX_CONTROL_TEXT",
    "PAUSED",
    "Pause",
    "Trigger",
    "check_control_text",
    "check_until",
    "is_triggered_slot",
    "next_trigger_slot",
    "pause_skip_reason",
]

PAUSED = "paused"
"""The skip reason a claim of a paused job's slot records (P1); the pause's own reason, if
any, follows after a colon: ``paused: deploy freeze``."""

MAX_CONTROL_TEXT = 200
"""Longest `reason` and `by` of a pause or a trigger (printable text)."""


@attrs.frozen(kw_only=True)
class Pause:
    """A job paused for every instance: its new slots are decided ``skipped: paused`` (P1)."""

    job: str = attrs.field(validator=lambda _, __, v: check_name(v))
    since_ms: int
    """When the pause was written, epoch ms by the store's clock (or the writer's)."""
    until_ms: int | None = None
    """When it ends by itself (epoch ms, exclusive); None: until `resume`."""
    reason: str = ""
    by: str = ""
    """Who paused it (the CLI writes the user and host)."""

    def active(self, now_ms: int) -> bool:
        """Whether the pause holds at `now_ms` (the store's clock where it has one)."""
        return self.until_ms is None or now_ms < self.until_ms


@attrs.frozen(kw_only=True)
class Trigger:
    """A run of `job` asked for now: an ad-hoc slot that exactly one instance wins (X1)."""

    job: str = attrs.field(validator=lambda _, __, v: check_name(v))
    slot: int
    """The ad-hoc slot, epoch ms: the store's time of the trigger, never on a whole second
    (scheduled slots always are), so it cannot collide with a scheduled slot."""
    requested_at: int
    """When it was written, epoch ms."""
    reason: str = ""
    by: str = ""


def is_triggered_slot(slot: int) -> bool:
    """Whether `slot` is an ad-hoc (triggered) slot: scheduled slots (cron, ``every=``) are whole
    seconds, triggered ones never are."""
    return slot % 1000 != 0


def next_trigger_slot(now: int, last: int | None) -> int:
    """X1: a trigger's slot: the store's `now`, past the job's last triggered slot at or after it
    (`last`), and never on a whole second (scheduled slots always are)."""
    slot = now if last is None else max(now, last + 1)
    return slot + 1 if slot % 1000 == 0 else slot


def pause_skip_reason(pause: Pause) -> str:
    """The skip reason P1 records for a slot of `pause`'s job: ``paused`` or ``paused: why``."""
    return f"{PAUSED}: {pause.reason}" if pause.reason else PAUSED


def check_control_text(value: object, what: str) -> str:
    """A pause's or trigger's `reason` or `by`: printable text of at most `MAX_CONTROL_TEXT`
    characters (it is shown in history and logs, and a skip's reason ends the claim's answer,
    so it holds no newline), or `ConfigError` naming `what`."""
    if not isinstance(value, str) or len(value) > MAX_CONTROL_TEXT or not value.isprintable():
        raise ConfigError(
            f"{what} must be printable text of at most {MAX_CONTROL_TEXT} characters (no "
            f"newline), got {shown(value)}"
        )
    return value


def check_until(until_ms: object) -> int | None:
    """A pause's end: None (until `resume`), or an int of epoch ms (one already past makes a
    pause that has ended: it is written, and holds nothing); else `ConfigError`."""
    if until_ms is None:
        return None
    if (
        isinstance(until_ms, bool)
        or not isinstance(until_ms, int)
        or not 0 <= until_ms <= MAX_SLOT_MS
    ):
        raise ConfigError(
            f"until_ms must be None (until resume) or an int of epoch milliseconds, got "
            f"{shown(until_ms)}"
        )
    return until_ms
