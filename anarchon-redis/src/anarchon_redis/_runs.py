"""Reading what Redis holds back into anarchon's values; nothing read is trusted (DESIGN 11)."""

from __future__ import annotations

import json
from typing import Any

from anarchon import RunRecord, RunStatus, StoreCorrupt

__all__ = ["run_from_json"]

_OPTIONAL = ("claimed_at", "lease_until", "finished_at")


def _is_int(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def run_from_json(raw: str, job: str, slot: int, key: str) -> RunRecord:
    """A run stored by the lease script (hash `key`, field = slot) as a `RunRecord`."""
    where = f"Redis key {key} field {slot}"
    try:
        data = json.loads(raw)
    except ValueError:
        data = None
    if not isinstance(data, dict):
        raise StoreCorrupt(f"{where} is not a JSON object: {raw[:80]!r}; anarchon did not write it")
    try:
        status = RunStatus(data.get("status"))
    except ValueError:
        raise StoreCorrupt(f"{where} has status {data.get('status')!r}") from None
    attempt, token, holder = data.get("attempt"), data.get("token"), data.get("holder")
    if not isinstance(attempt, int) or isinstance(attempt, bool) or attempt < 1:
        raise StoreCorrupt(f"{where} has attempt {attempt!r}; expected an integer >= 1")
    if not isinstance(token, str) or not isinstance(holder, str):
        raise StoreCorrupt(f"{where} has token {token!r} and holder {holder!r}; expected text")
    for name in _OPTIONAL:
        if data.get(name) is not None and not _is_int(data[name]):
            raise StoreCorrupt(f"{where} has {name} {data[name]!r}; expected epoch milliseconds")
    error = data.get("error")
    if error is not None and not isinstance(error, str):
        raise StoreCorrupt(f"{where} has error {error!r}; expected text")
    return RunRecord(
        job=job,
        slot=slot,
        status=status,
        attempt=attempt,
        token=token,
        holder=holder,
        claimed_at=data.get("claimed_at"),
        lease_until=data.get("lease_until"),
        finished_at=data.get("finished_at"),
        error=error,
    )
