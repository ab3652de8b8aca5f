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

from anarchon import RunRecord, RunStatus, StoreCorrupt

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

_RUN = re.compile(r"([a-z]+) (\d+) (\d+) (\d+|-) (\d+) (\d+|-) ([0-9a-f]+) (\d+) ", re.ASCII)


def run_fields(raw: str, key: str, slot: int) -> dict[str, str | None]:
    """The fields of a stored run as text (``finished_at`` and ``error`` None when absent)."""
    match = _RUN.match(raw)
    rest = raw[match.end() :].encode() if match else b""
    size = int(match.group(8)) if match else 0
    tail = rest[size:]
    if match is None or size > len(rest) or not (tail == b"" or tail.startswith(b"|")):
        raise StoreCorrupt(
            f"Redis key {key} field {slot} is not a run anarchon writes ({' '.join(FIELDS)}): "
            f"{raw[:80]!r}"
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
    """A run stored by the lease script (hash `key`, field = slot) as a `RunRecord`."""
    fields = run_fields(raw, key, slot)
    try:
        status = RunStatus(fields["status"])
    except ValueError:
        raise StoreCorrupt(
            f"Redis key {key} field {slot} has status {fields['status']!r}"
        ) from None
    attempt = int(fields["attempt"] or 0)
    lease = fields["lease_until"]
    skipped = status is RunStatus.SKIPPED  # only a skip record has attempt 0 and no lease
    if attempt < (0 if skipped else 1) or status is RunStatus.CLAIMED or (lease is None) != skipped:
        raise StoreCorrupt(
            f"Redis key {key} field {slot} holds attempt {attempt} and lease_until "
            f"{lease or '-'} ({status})"
        )
    finished = fields["finished_at"]
    return RunRecord(
        job=job,
        slot=slot,
        status=status,
        attempt=attempt,
        token=fields["token"] or "",
        holder=fields["holder"] or "",
        claimed_at=int(fields["claimed_at"] or 0),
        lease_until=None if lease is None else int(lease),
        finished_at=None if finished is None else int(finished),
        error=fields["error"],
    )
