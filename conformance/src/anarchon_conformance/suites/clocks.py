"""T1: a lease store judges lateness and lease expiry by its own clock, never by the clock of the
instance that claims. A store with no clock of its own says so (``now_ms()`` is None,
``store_clock=False``); then every instance judges by its own corrected clock, the rule T4 sets
for stores without leases, and clock skew between instances is what that costs.

On a loopback test setup every process shares the server's clock, so a store that reads the
client's clock passes every other check. This one claims from OS processes whose wall clock is
shifted by `SHIFT_S` seconds either way with libfaketime (Debian's ``faketime`` package;
``ANARCHON_TEST_LIBFAKETIME`` names the library), the monotonic clock left alone; the server is
not shifted. Not applicable without libfaketime (the skip says how to install it), for stores
that live in one process, and for stores whose clock is the host's (`BackendHarness.host_clock`).
"""

from __future__ import annotations

import asyncio
import json
import os
import sys
import time
from pathlib import Path
from typing import Any

import pytest

from anarchon import ClaimStore, new_token

from .._harness import BackendHarness
from .._rules import rule
from ._base import HarnessSuite, capability_doc, require, within

__all__ = ["LIBFAKETIME_ENV", "ClockTests", "libfaketime"]

LIBFAKETIME_ENV = "ANARCHON_TEST_LIBFAKETIME"
"""The path of ``libfaketime.so.1`` (``scripts/faketime`` exports it)."""
DEBIAN_LIBFAKETIME = "/usr/lib/x86_64-linux-gnu/faketime/libfaketime.so.1"
SHIFT_S = 30
"""How far the shifted claimers' wall clocks are off, ahead and behind."""
LEASE_MS = 20_000
"""Shorter than the shift: a client 30 s ahead sees every such lease as run out."""
MAX_LATE_MS = 20_000
ATTEMPTS = 3
"""Runs of the check before it gives up on a machine too busy to claim within a lease."""
TOLERANCE_MS = 5_000
"""How far a shifted process's `now_ms()` may be from the store's clock read here."""


def libfaketime() -> str | None:
    """The libfaketime library to preload, or None when it is not installed."""
    path = os.environ.get(LIBFAKETIME_ENV) or DEBIAN_LIBFAKETIME
    return path if Path(path).is_file() else None


class ClockTests(HarnessSuite):
    """T1, on every store (the declared clock) and on lease stores (shifted claimers)."""

    @rule("T1")
    @pytest.mark.asyncio
    async def test_T1_store_clock_is_declared(self, harness: BackendHarness) -> None:
        store = await self.open(harness)
        now = await within(store.now_ms())
        declared = store.capabilities.store_clock
        assert declared == (now is not None), (
            f"T1: capabilities.store_clock is {declared} but now_ms() answered {now!r}: a store "
            "with a clock of its own returns it from now_ms(), a store without one returns None "
            "(then instances judge leases and lateness by their own corrected clocks)"
        )
        if now is not None:
            local = time.time_ns() // 1_000_000
            assert abs(now - local) < 3_600_000, (
                f"T1: now_ms() must be epoch milliseconds, got {now} (this host: {local})"
            )

    @rule("T1")
    @pytest.mark.asyncio
    async def test_T1_shifted_client_clocks_do_not_move_the_store(
        self, harness: BackendHarness
    ) -> None:
        """Claims from a process 30 s ahead and one 30 s behind are judged by the store's clock:
        a live lease stays running, a fresh slot is won, a late slot is not, and a lease written
        by a shifted process ends at the store's now + lease."""
        require(harness, "leases")
        if not harness.capabilities.store_clock:
            pytest.skip(
                "not applicable: capability store_clock is off "
                f"({capability_doc('store_clock')}); each instance judges by its own corrected "
                "clock, so clock skew between instances widens the window in which two both see "
                "a lease as run out, and fencing (L7-L9, F1) keeps the late runner out"
            )
        if harness.host_clock:
            pytest.skip(
                "not applicable: the store's clock is the host's wall clock "
                "(BackendHarness.host_clock), which every process reaching the store shares"
            )
        url = harness.process_url()
        if url is None:
            pytest.skip(
                "not applicable: the store lives in one process (harness.process_url() is None)"
            )
        library = libfaketime()
        if library is None:
            pytest.skip(
                f"not applicable here: libfaketime is not installed (set {LIBFAKETIME_ENV}, or "
                "install Debian's faketime package: scripts/faketime)"
            )
        store = await self.open_lease(harness)
        for attempt in range(ATTEMPTS):
            if await self.shifted_claims(harness, store, url, library, f"t1r{attempt}"):
                return
        pytest.fail(
            f"T1: the check could not run in time in {ATTEMPTS} attempts (the claiming "
            f"processes took longer than a {LEASE_MS} ms lease): the machine is too busy"
        )

    async def shifted_claims(
        self, harness: BackendHarness, store: ClaimStore, url: str, library: str, job: str
    ) -> bool:
        """One run of the check; False when a claiming process came too late for its answer to
        tell (a lease had run out or a slot had turned late by the store's clock meanwhile)."""
        held: dict[str, int] = {}
        """The store's clock before the process that first claimed each job was started."""
        slots: dict[str, int] = {}
        # Every claim comes from another OS process, under `process_prefix`: the shifted ones
        # and the unshifted ones (shift 0) that set up a live lease and read it back.
        for shift, claims in (
            (0, [("a free slot", f"{job}held", 0, "won")]),
            (
                +SHIFT_S,
                [
                    ("a live lease (20 s long, by the store's clock)", f"{job}held", 0, "running"),
                    ("a slot 2 s old with max_late 20 s", f"{job}fresh", -2_000, "won"),
                ],
            ),
            (
                -SHIFT_S,
                [
                    ("a slot 40 s old with max_late 20 s", f"{job}late", -40_000, "late"),
                    ("a free slot 1 s old", f"{job}lease", -1_000, "won"),
                ],
            ),
            (
                0,
                [
                    (
                        "the slot whose 20 s lease the process 30 s behind just took (live)",
                        f"{job}lease",
                        -1_000,
                        "running",
                    )
                ],
            ),
        ):
            before = await self.now(store)
            for _, name, age, _ in claims:
                if name not in held:
                    slots[name] = before - before % 1000 + age
                    held[name] = before
            sent = [
                (what, name, held.get(name, before), expected) for what, name, _, expected in claims
            ]
            started = time.time_ns() // 1_000_000
            result = await self.shifted(harness, url, library, shift, sent, slots)
            ended = time.time_ns() // 1_000_000
            after = await self.now(store)
            wall = result["wall_ms"] - shift * 1000
            if shift and not started - TOLERANCE_MS <= wall <= ended + TOLERANCE_MS:
                pytest.skip(
                    f"not applicable here: libfaketime ({library}) did not shift the clock of "
                    f"the claiming process by {shift:+d} s (its clock read "
                    f"{result['wall_ms'] - started:+d} ms from this process's at its start)"
                )
            for (what, name, since, expected), (outcome, _attempt, reason) in zip(
                sent, result["answers"], strict=True
            ):
                ok = outcome == expected or (
                    expected == "late" and outcome in ("late", "skipped") and reason
                )
                if ok:
                    continue
                if expected == "running" and after >= since + LEASE_MS:
                    return False  # the lease may really have run out meanwhile
                if expected == "won" and after - slots[name] > MAX_LATE_MS:
                    return False  # the slot may really have turned late meanwhile
                raise AssertionError(
                    f"T1: a claim of {what}, sent by a process whose clock is {shift:+d} s off, "
                    f"must be {expected} by the store's clock, got {outcome} ({reason}): the "
                    "store judges by the claiming client's clock"
                    + (" (the lease was written by the client 30 s behind)" if shift == 0 else "")
                )
            told = result["now_ms"]
            assert told is None or before - TOLERANCE_MS <= told <= after + TOLERANCE_MS, (
                f"T1: now_ms() in a process whose wall clock is {shift:+d} s off answered "
                f"{told}, the store's clock is {before}..{after}: it reads the client's clock"
            )
        return True

    async def shifted(
        self,
        harness: BackendHarness,
        url: str,
        library: str,
        shift: int,
        claims: list[tuple[str, str, int, str]],
        slots: dict[str, int],
    ) -> dict[str, Any]:
        """Run the claims from one process whose wall clock is `shift` seconds off."""
        spec = {
            "url": url,
            "prefix": harness.process_prefix,
            "plugins": list(harness.plugins),
            "claims": [
                {
                    "job": job,
                    "slot": slots[job],
                    "token": new_token(),
                    "lease_ms": LEASE_MS,
                    "max_late_ms": MAX_LATE_MS,
                }
                for _, job, _, _ in claims
            ],
        }
        env = {**os.environ, "PYTHONPATH": os.pathsep.join(p for p in sys.path if p)}
        if shift:
            env.update(
                LD_PRELOAD=library,
                FAKETIME=f"{shift:+d}s",
                FAKETIME_DONT_FAKE_MONOTONIC="1",
                FAKETIME_DONT_RESET="1",
            )
        proc = await asyncio.create_subprocess_exec(
            sys.executable,
            "-m",
            "anarchon_conformance._shifted",
            json.dumps(spec),
            stdout=asyncio.subprocess.PIPE,
            stderr=asyncio.subprocess.PIPE,
            env=env,
        )
        try:
            out, err = await within(proc.communicate(), 60)
        finally:
            if proc.returncode is None:
                proc.kill()
                await proc.wait()
        assert proc.returncode == 0, (
            f"T1: the claiming process with its clock {shift:+d} s off failed:\n{err.decode()}"
        )
        result: dict[str, Any] = json.loads(out)
        return result
