"""Every package's tests run alone: pytest started in the package's folder collects its tests,
without another package's test modules on the path (they share only `anarchon_test_support`)."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
FOLDERS = sorted(
    str(tests.parent.relative_to(ROOT))
    for tests in [*ROOT.glob("*/tests"), *ROOT.glob("examples/*/tests")]
    if not tests.parent.name.startswith(".")
)


def test_every_package_with_tests_is_in_the_testpaths() -> None:
    config = (ROOT / "pyproject.toml").read_text()
    assert len(FOLDERS) >= 10, FOLDERS
    missing = [folder for folder in FOLDERS if f'"{folder}/tests"' not in config]
    assert not missing, f"add them to testpaths in the root pyproject.toml: {missing}"


@pytest.mark.processes
def test_each_package_collects_its_tests_from_its_own_folder() -> None:
    procs = {
        folder: subprocess.Popen(
            [sys.executable, "-m", "pytest", "--collect-only", "-q", "-p", "no:cacheprovider"],
            cwd=ROOT / folder,
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            text=True,
        )
        for folder in FOLDERS
    }
    failed = {}
    for folder, proc in procs.items():
        out, _ = proc.communicate(timeout=240)
        tests = [line for line in out.splitlines() if "::" in line]
        # Node ids start at the rootdir: the repository's, or the package's own when it has a
        # pytest configuration (the MariaDB example stands alone, as a third party's would).
        elsewhere = [t for t in tests if not t.startswith((f"{folder}/tests/", "tests/"))]
        if proc.returncode != 0 or not tests or elsewhere:
            failed[folder] = out[-3000:]
    assert not failed, failed
