"""The fast selection stays fast: ``pytest -m "not services and not processes and not slow"``.

``anarchon_test_support.markers``, loaded for every run from the root configuration, fails a test
that starts an OS process without the ``processes`` or ``services`` marker. These tests run that
check on a small test file of their own, in a pytest of its own, and check that the root
configuration loads it and registers every marker of the fast selection.
"""

from __future__ import annotations

import ast
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from anarchon_test_support.markers import (
    FAST_SELECTION,
    PROCESSES,
    SERVICES,
    SLOW,
    SLOW_HINT_S,
)

if sys.version_info >= (3, 11):
    import tomllib
else:
    import tomli as tomllib

ROOT = Path(__file__).resolve().parents[2]
PYTEST = tomllib.loads((ROOT / "pyproject.toml").read_text(encoding="utf-8"))["tool"]["pytest"][
    "ini_options"
]

CHECKED = """
import os
import subprocess
import sys
import time

import pytest

from anarchon_test_support.markers import SLOW_HINT_S


def start() -> None:
    subprocess.run([sys.executable, "-c", "pass"], check=True)


@pytest.fixture
def started_in_a_fixture():
    yield
    start()


def test_pure() -> None:
    assert True


def test_unmarked_popen() -> None:
    start()


def test_unmarked_system() -> None:
    assert os.system("true") == 0


def test_unmarked_fixture(started_in_a_fixture: None) -> None:
    pass


@pytest.mark.processes
def test_marked_processes() -> None:
    start()


@pytest.mark.services
def test_marked_services() -> None:
    start()


@pytest.mark.parametrize("n", [pytest.param(1, marks=pytest.mark.processes), 2])
def test_parameter(n: int) -> None:
    start()


def test_fails_itself() -> None:
    start()
    raise AssertionError("its own failure")


def test_takes_long() -> None:
    deadline = time.monotonic() + SLOW_HINT_S + 0.1
    while time.monotonic() < deadline:  # stands for a test that waits on the clock by design
        time.sleep(0.05)


@pytest.mark.slow
def test_takes_long_marked() -> None:
    test_takes_long()
"""


PLUGINS = ["-p", "anarchon_test_support.markers", "-p", "no:asyncio", "-p", "no:cacheprovider"]


def _run_checked(tmp_path: Path) -> tuple[dict[str, set[str]], str]:
    """Each test of CHECKED with its reports (PASSED, FAILED, ERROR), and the whole output."""
    (tmp_path / "test_checked.py").write_text(CHECKED, encoding="utf-8")
    (tmp_path / "pytest.ini").write_text(
        textwrap.dedent(f"""\
            [pytest]
            markers =
                {PROCESSES}: starts OS processes
                {SERVICES}: needs a server
                {SLOW}: waits
            """),
        encoding="utf-8",
    )
    result = subprocess.run(
        [sys.executable, "-m", "pytest", "-rA", "-q", *PLUGINS],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    outcomes: dict[str, set[str]] = {}
    for line in result.stdout.splitlines():
        word, _, rest = line.partition(" ")
        if word in ("PASSED", "FAILED", "ERROR") and "::" in rest:
            name = rest.split("::", 1)[1].split(" ", 1)[0]
            outcomes.setdefault(name, set()).add(word)
    return outcomes, result.stdout + result.stderr


@pytest.mark.processes
def test_a_test_that_starts_a_process_unmarked_fails_and_says_how_to_fix_it(
    tmp_path: Path,
) -> None:
    outcomes, output = _run_checked(tmp_path)
    # An unmarked test passes its call, then errors at teardown: pytest reports both.
    flagged = {"PASSED", "ERROR"}
    assert outcomes == {
        "test_pure": {"PASSED"},
        "test_unmarked_popen": flagged,
        "test_unmarked_system": flagged,
        "test_unmarked_fixture": flagged,
        "test_marked_processes": {"PASSED"},
        "test_marked_services": {"PASSED"},
        "test_parameter[1]": {"PASSED"},
        "test_parameter[2]": flagged,
        "test_fails_itself": {"FAILED", "ERROR"},
        "test_takes_long": {"PASSED"},
        "test_takes_long_marked": {"PASSED"},
    }, output
    assert (
        "test_checked.py::test_unmarked_popen started an OS process (subprocess.Popen" in output
    ), output
    assert "test_checked.py::test_unmarked_system started an OS process (os.system" in output
    assert f"mark it `{PROCESSES}`" in output
    assert FAST_SELECTION in output
    assert "its own failure" in output, "a test's own failure must stay its report"
    hint = output.split(f"unmarked tests that took {SLOW_HINT_S:g} s or more", 1)[-1]
    hint = hint.split("short test summary info", 1)[0]
    assert "test_checked.py::test_takes_long\n" in hint, output
    assert "test_takes_long_marked" not in hint, output
    assert f"mark it `{SLOW}`" in hint, output


def test_the_root_configuration_loads_the_check_and_registers_the_markers() -> None:
    addopts = PYTEST["addopts"]
    assert addopts[addopts.index("-p") + 1] == "anarchon_test_support.markers", addopts
    registered = {line.split(":", 1)[0] for line in PYTEST["markers"]}
    assert {SERVICES, PROCESSES, SLOW} <= registered, registered


def test_the_check_is_loaded_in_this_run(pytestconfig: pytest.Config) -> None:
    assert pytestconfig.pluginmanager.has_plugin("anarchon_test_support.markers")


def test_the_root_configuration_names_the_fast_selection() -> None:
    text = (ROOT / "pyproject.toml").read_text(encoding="utf-8")
    assert f'pytest -m "{FAST_SELECTION}"' in text


WORDS = ("multiprocessing", "ProcessPoolExecutor")


def _uses_multiprocessing(source: str) -> bool:
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Import):
            modules = [alias.name for alias in node.names]
        elif isinstance(node, ast.ImportFrom):
            modules = [node.module or "", *(f"{node.module}.{a.name}" for a in node.names)]
        else:
            continue
        if any(
            m.split(".")[0] == "multiprocessing" or m.endswith("ProcessPoolExecutor")
            for m in modules
        ):
            return True
    return False


def unseen_process_starters(folders: list[Path]) -> list[str]:
    """Python files under `folders` that import multiprocessing, whose spawn and forkserver
    methods start processes without an audit event (so the check cannot see them)."""
    return sorted(
        str(path)
        for folder in folders
        for path in folder.rglob("*.py")
        if any(word in (text := path.read_text(encoding="utf-8")) for word in WORDS)
        and _uses_multiprocessing(text)
    )


def test_no_test_uses_multiprocessing(tmp_path: Path) -> None:
    (tmp_path / "test_pool.py").write_text(
        "from concurrent.futures import ProcessPoolExecutor\n", encoding="utf-8"
    )
    assert unseen_process_starters([tmp_path]) == [str(tmp_path / "test_pool.py")]
    folders = [ROOT / path for path in PYTEST["testpaths"]] + [ROOT / "test-support" / "src"]
    found = unseen_process_starters(folders)
    assert not found, (
        f"{found} use multiprocessing, which the marker check cannot see: start processes with "
        "subprocess (anarchon_test_support.worker_processes) instead"
    )
