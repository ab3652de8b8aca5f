"""Mutation checks: the kit must fail the right rule of each deliberately broken backend.

A kit that passes a broken backend is the worst bug it can have. Each broken backend is certified
in its own process, as `anarchon certify` does, all at once to keep the run short.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

from anarchon_conformance import Certificate, RuleStatus
from anarchon_conformance.suites.clocks import LIBFAKETIME_ENV, libfaketime

pytestmark = pytest.mark.processes  # each broken backend is certified in its own process

HERE = Path(__file__).parent

BROKEN = {
    "broken_backends:AlwaysWinsHarness": "C1",
    "broken_backends:ForgetsTokenHarness": "C2",
    "broken_backends:RenewsAnyTokenHarness": "L7",
    "broken_backends:ForgetsEarlyHarness": "T3",
    "broken_backends:IgnoresMaxLateHarness": "L1",
    "broken_backends:PreparesByClaimingHarness": "PREP",
    "broken_backends:SetsUpByClaimingHarness": "SETUP",
    "broken_backends:WritesNoSkipRecordHarness": "S1",
    "broken_backends:AcceptsEarlyClaimsHarness": "C5",
    "broken_backends:AcceptsEarlyClaimsLongHarness": "C5",
    "broken_backends:FinishNotIdempotentHarness": "L8",
    "broken_backends:SetsUpWhenReadOnlyHarness": "R1",
    "broken_backends:IgnoresPauseHarness": "P1",
    "broken_backends:TriggersOnTheSecondHarness": "X1",
    "broken_backends:TriggersShareSlotsHarness": "X1",
    "broken_backends:IgnoresRetryDelayHarness": "L12",
    "broken_backends:LosesTryLogHarness": "L12",
    "broken_backends:ListsExpiredMembersHarness": "M1",
    # A lease store with no clock of its own, broken four ways (the outsider's etcd variants).
    "clockless_store:YesManHarness": "C1",
    "clockless_store:AmnesiacHarness": "T3",
    "clockless_store:UnfencedHarness": "L7",
    "clockless_store:ClientClockHarness": "T1",
}
SOUND = (
    "broken_backends:Control",
    "broken_backends:RefusesEarlyClaimsHarness",
    "broken_backends:KeepsMembersHarness",
)
"""Not broken: certified. The second keeps C5 with a write-time window by refusing early claims,
so the C5 check is shown to tell refusing from forgetting; the third keeps the member list (M1)
that its broken twin lists expired members from. (The sound clockless store is
certified in test_clockless_conformance.py.)"""
PARALLEL = max(4, 2 * (os.cpu_count() or 1))
"""How many certifications run at once."""
NEEDS_LIBFAKETIME = {"clockless_store:ClientClockHarness"}
"""Refused only by the T1 check, which shifts a claiming process's clock with libfaketime."""


@pytest.fixture(scope="module")
def certified(
    tmp_path_factory: pytest.TempPathFactory,
) -> dict[str, tuple[int, Certificate, str]]:
    out = tmp_path_factory.mktemp("certificates")
    logs = {name: (out / f"{_file(name)}.log").open("wb") for name in [*BROKEN, *SOUND]}
    procs: dict[str, subprocess.Popen[bytes]] = {}
    results = {}
    try:
        # A few at a time: the kit's timing checks (late by a few hundred ms) need the CPU.
        pending = list(logs)
        while pending or any(p.poll() is None for p in procs.values()):
            running = sum(p.poll() is None for p in procs.values())
            while pending and running < PARALLEL:
                name = pending.pop(0)
                procs[name] = subprocess.Popen(
                    [
                        sys.executable,
                        "-m",
                        "anarchon_conformance",
                        name,
                        "--out",
                        str(out / _file(name)),
                    ],
                    cwd=HERE,
                    env={**os.environ, "ANARCHON_HYPOTHESIS_PROFILE": "smoke"},
                    stdout=logs[name],
                    stderr=subprocess.STDOUT,
                )
                running += 1
            alive = [p for p in procs.values() if p.poll() is None]
            if alive:
                alive[0].wait(timeout=240)
        for name, proc in procs.items():
            logs[name].close()
            files = list((out / _file(name)).glob("*.json"))
            output = (out / f"{_file(name)}.log").read_text()
            assert len(files) == 1, f"{name} wrote no certificate:\n{output}"
            certificate = Certificate.from_dict(json.loads(files[0].read_text()))
            results[name] = (proc.returncode, certificate, output)
    finally:
        for name, proc in procs.items():
            if proc.poll() is None:
                proc.kill()
                proc.wait()
            logs[name].close()
    return results


@pytest.mark.parametrize("harness", SOUND)
def test_the_unbroken_controls_are_certified(
    certified: dict[str, tuple[int, Certificate, str]], harness: str
) -> None:
    code, certificate, output = certified[harness]
    assert certificate.certified, f"{certificate.to_text()}\n{output}"
    assert code == 0


@pytest.mark.parametrize(("harness", "rule"), sorted(BROKEN.items()))
def test_broken_backend_fails_its_rule(
    certified: dict[str, tuple[int, Certificate, str]], harness: str, rule: str
) -> None:
    code, certificate, output = certified[harness]
    if harness in NEEDS_LIBFAKETIME and libfaketime() is None:
        pytest.skip(f"libfaketime is not installed (scripts/faketime; {LIBFAKETIME_ENV})")
    assert certificate.status(rule) is RuleStatus.FAILED, certificate.to_text()
    assert not certificate.certified
    assert code == 1, "anarchon certify must exit non-zero when a rule fails"
    assert re.search(rf"AssertionError: {rule}\b", output), (
        f"the kit failed {harness} without a message naming {rule}:\n{output}"
    )


def _file(harness: str) -> str:
    return harness.replace(":", "-")


def test_certify_names_the_harness_and_no_temporary_file(
    certified: dict[str, tuple[int, Certificate, str]],
) -> None:
    """`anarchon certify` shows the harness it was given as the suite, and prints only the
    files it wrote into --out (none in a temporary folder it deleted)."""
    _code, certificate, output = certified["broken_backends:Control"]
    assert certificate.suite == "broken_backends:Control", certificate.suite
    assert re.search(r"^suite broken_backends:Control$", output, re.MULTILINE), output
    assert "written:" not in output, output
    assert re.search(r"^wrote .*broken_backends-Control.*\.json$", output, re.MULTILINE), output
