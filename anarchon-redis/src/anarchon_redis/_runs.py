"""The lease strategy's stored run, read back into anarchon's values; nothing read is trusted
(DESIGN 11).

A run is one flat string in the job's ``:runs`` hash (field = slot), written by ``lease.lua``::

    <status> <attempt> <claimed_at> <lease_until> <keep_until> <finished_at or -> <token> <n> <holder>[|<error>]

where ``<n>`` is the length of ``<holder>`` in bytes (so a holder may hold any character). A flat
string costs the script a fraction of what JSON costs to write and read on every claim. A skip
record (S1) is ``skipped 0 <now> - <keep_until> <now> <token> <n> <holder>|<reason>``: attempt 0
and no lease (``-``).
"""

from __future__ import annotations

import re

from anarchon.backend import RunRecord, RunStatus, StoreCorrupt, shown

__all__ = ["FIELDS", "run_fields", "run_from_value", "run_value"]

FIELDS = (
    "status",
    "attempt",
    "claimed_at",
    "lease_until",
    "keep_until",
    "finished_at",
    "token",
    "holder",
    "error",
)
"""The fields of a stored run, in their order in the string."""

_NUMBER = r"\d{1,19}"
"""A stored number: at most 19 digits (every value anarchon writes fits in a signed 64-bit
integer), so that reading a damaged value never parses a number of megabytes."""
_PARTS = (
    ("status", r"[a-z]+"),
    ("attempt", _NUMBER),
    ("claimed_at", _NUMBER),
    ("lease_until", rf"{_NUMBER}|-"),
    ("keep_until", _NUMBER),
    ("finished_at", rf"{_NUMBER}|-"),
    ("token", r"[0-9a-f]+"),
    ("holder's length", _NUMBER),
)
_RUN = re.compile("".join(f"({pattern}) " for _, pattern in _PARTS), re.ASCII)


def _what_is_wrong(raw: str, rest: bytes, size: int) -> str:
    """Which part of a stored run that `_RUN` refused (or whose holder and error do not fit)
    is wrong, for the error message."""
    parts = raw.split(" ", len(_PARTS))
    for (name, pattern), value in zip(_PARTS, parts, strict=False):
        if re.fullmatch(pattern, value, re.ASCII) is None:
            return f"has {name} {shown(value)}"
    if len(parts) <= len(_PARTS):
        return f"ends after {len(parts)} of its {len(_PARTS) + 1} parts"
    if size > len(rest):
        return f"has a holder of {size} bytes, but only {len(rest)} follow"
    return f"has text after the holder that is not an error: {shown(rest[size:].decode())}"


def run_fields(raw: str, key: str, slot: int) -> dict[str, str | None]:
    """The fields of a stored run as text (``finished_at`` and ``error`` None when absent);
    `StoreCorrupt` naming the part that is wrong."""
    match = _RUN.match(raw)
    rest = raw[match.end() :].encode(errors="replace") if match else b""
    size = int(match.group(8)) if match else 0
    tail = rest[size:]
    if match is None or size > len(rest) or not (tail == b"" or tail.startswith(b"|")):
        raise StoreCorrupt(
            f"Redis key {key} field {slot} {_what_is_wrong(raw, rest, size)}, so it is not a "
            f"run anarchon writes ({' '.join(FIELDS)}): remove or repair the field, and the "
            "slot's member of the job's :slots"
        )
    status, attempt, claimed, lease, keep, finished, token = match.groups()[:7]
    return {
        "status": status,
        "attempt": attempt,
        "claimed_at": claimed,
        "lease_until": None if lease == "-" else lease,
        "keep_until": keep,
        "finished_at": None if finished == "-" else finished,
        "token": token,
        "holder": rest[:size].decode(errors="replace"),
        "error": tail[1:].decode(errors="replace") if tail else None,
    }


def run_value(fields: dict[str, str | None]) -> str:
    """The stored string of `fields` (as `run_fields` returns them)."""
    holder = fields["holder"] or ""
    error = fields["error"]
    return (
        f"{fields['status']} {fields['attempt']} {fields['claimed_at']} "
        f"{fields['lease_until'] or '-'} "
        f"{fields['keep_until']} {fields['finished_at'] or '-'} {fields['token']} "
        f"{len(holder.encode())} {holder}{'' if error is None else '|' + error}"
    )


def run_from_value(raw: str, job: str, slot: int, key: str) -> RunRecord:
    """A run stored by the lease script (hash `key`, field = slot) as a `RunRecord`; every
    value is checked (`RunRecord.from_row`), and the lease strategy's own rules: a skip record,
    and only a skip record, has no lease; no run is ``claimed``."""
    fields = run_fields(raw, key, slot)
    lease = fields["lease_until"]
    finished = fields["finished_at"]
    record = RunRecord.from_row(
        (
            slot,
            fields["status"],
            int(fields["attempt"] or 0),
            fields["token"] or "",
            fields["holder"] or "",
            int(fields["claimed_at"] or 0),
            None if lease is None else int(lease),
            None if finished is None else int(finished),
            fields["error"],
        ),
        job=job,
        where=f"Redis key {key}",
    )
    skipped = record.status is RunStatus.SKIPPED
    if record.status is RunStatus.CLAIMED or (lease is None) != skipped:
        raise StoreCorrupt(
            f"Redis key {key} field {slot} holds a {record.status} run with lease_until "
            f"{lease or '-'}; the lease strategy writes no claimed run, and no lease only for a "
            "skipped one: remove or repair the field"
        )
    return record
