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

HERE = Path(__file__).parent

BROKEN = {
    "AlwaysWinsHarness": "C1",
    "ForgetsTokenHarness": "C2",
    "RenewsAnyTokenHarness": "L7",
    "ForgetsEarlyHarness": "T3",
    "IgnoresMaxLateHarness": "L1",
    "PreparesByClaimingHarness": "PREP",
    "SetsUpByClaimingHarness": "SETUP",
    "WritesNoSkipRecordHarness": "S1",
    "AcceptsEarlyClaimsHarness": "C5",
    "AcceptsEarlyClaimsLongHarness": "C5",
    "FinishNotIdempotentHarness": "L8",
}
SOUND = ("Control", "RefusesEarlyClaimsHarness")
"""Not broken: certified. The second keeps C5 with a write-time window by refusing early claims,
so the C5 check is shown to tell refusing from forgetting."""


@pytest.fixture(scope="module")
def certified(
    tmp_path_factory: pytest.TempPathFactory,
) -> dict[str, tuple[int, Certificate, str]]:
    out = tmp_path_factory.mktemp("certificates")
    logs = {name: (out / f"{name}.log").open("wb") for name in [*BROKEN, *SOUND]}
    procs = {
        name: subprocess.Popen(
            [
                sys.executable,
                "-m",
                "anarchon_conformance",
                f"broken_backends:{name}",
                "--out",
                str(out / name),
            ],
            cwd=HERE,
            env={**os.environ, "ANARCHON_HYPOTHESIS_PROFILE": "smoke"},
            stdout=log,
            stderr=subprocess.STDOUT,
        )
        for name, log in logs.items()
    }
    results = {}
    for name, proc in procs.items():
        proc.wait(timeout=240)
        logs[name].close()
        files = list((out / name).glob("*.json"))
        output = (out / f"{name}.log").read_text()
        assert len(files) == 1, f"{name} wrote no certificate:\n{output}"
        certificate = Certificate.from_dict(json.loads(files[0].read_text()))
        results[name] = (proc.returncode, certificate, output)
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
    assert certificate.status(rule) is RuleStatus.FAILED, certificate.to_text()
    assert not certificate.certified
    assert code == 1, "anarchon certify must exit non-zero when a rule fails"
    assert re.search(rf"AssertionError: {rule}\b", output), (
        f"the kit failed {harness} without a message naming {rule}:\n{output}"
    )
