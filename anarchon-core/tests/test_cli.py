"""The `anarchon` command line: each command's output and exit code, one-line errors without
tracebacks, `run` stopping gracefully on SIGTERM, and `demo` end to end (real processes)."""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import os
import re
import signal
import subprocess
import sys
import time
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner, Result

import anarchon
from anarchon import ClaimRequest, RunStatus, StoreUnavailable, new_token
from anarchon.cli import StructuredFormatter, cli
from anarchon.cli._run import load_scheduler
from anarchon.plugins import plugin_manager

DEMO = [sys.executable, "-m", "anarchon.cli", "demo"]
SLOT = 1_800_000_000_000  # 2027-01-15T08:00:00Z


@pytest.fixture(autouse=True)
def _restore_logging() -> Iterator[None]:
    root = logging.getLogger()
    handlers, level = root.handlers[:], root.level
    yield
    root.handlers[:] = handlers
    root.setLevel(level)


@pytest.fixture
def in_tmp(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """Work in an empty directory, with sys.path restored afterwards and no ANARCHON_* env."""
    monkeypatch.chdir(tmp_path)
    monkeypatch.setattr(sys, "path", list(sys.path))
    for name in [n for n in os.environ if n.startswith("ANARCHON_")]:
        monkeypatch.delenv(name)
    return tmp_path


def invoke(*args: str) -> Result:
    return CliRunner().invoke(cli, list(args), prog_name="anarchon")


def assert_one_line_error(result: Result, code: int, *fragments: str) -> None:
    assert result.exit_code == code, result.output
    assert result.stdout == ""
    lines = result.stderr.splitlines()
    assert len(lines) == 1, result.stderr
    assert lines[0].startswith("anarchon: error: ")
    assert "Traceback" not in result.stderr
    for fragment in fragments:
        assert fragment in lines[0]


def module_name() -> str:
    return f"cliapp_{uuid.uuid4().hex[:8]}"


def subprocess_env() -> dict[str, str]:
    return {k: v for k, v in os.environ.items() if not k.startswith("ANARCHON_")}


def wait_for(condition: Callable[[], bool], timeout: float, what: str) -> None:
    deadline = time.monotonic() + timeout
    while not condition():
        if time.monotonic() > deadline:
            pytest.fail(f"timed out after {timeout} s waiting for {what}")
        time.sleep(0.05)


# -- global -----------------------------------------------------------------------------------


def test_version_and_help_document_exit_codes() -> None:
    assert invoke("--version").output.strip() == f"anarchon, version {anarchon.__version__}"
    result = invoke("--help")
    assert result.exit_code == 0
    for line in ("Exit codes:", "2  bad usage or configuration", "3  the store could not be"):
        assert line in result.output
    for command in ("run", "demo", "backends", "history", "next", "certify"):
        assert re.search(rf"^\s+{command}\b", result.output, re.MULTILINE), command


def test_unexpected_errors_are_one_line_with_a_hint_and_debug_shows_them(in_tmp: Path) -> None:
    name = module_name()
    (in_tmp / f"{name}.py").write_text("raise RuntimeError('boom')\n")
    assert_one_line_error(invoke("run", f"{name}:scheduler"), 1, "RuntimeError: boom", "--debug")
    sys.modules.pop(name, None)
    result = invoke("--debug", "run", f"{name}:scheduler")
    assert result.exit_code == 1
    assert isinstance(result.exception, RuntimeError)


def test_structured_log_lines_keep_extra_fields_and_hide_passwords() -> None:
    record = logging.LogRecord("anarchon.x", logging.INFO, "f", 1, "to %s", ("a",), None)
    record.store = "redis://user:hunter2@localhost/0"
    record.slot = 5
    text = StructuredFormatter().format(record)
    assert "anarchon.x: to a" in text
    assert "slot=5" in text
    assert "store=redis://user:***@localhost/0" in text
    assert "hunter2" not in text


# -- next -------------------------------------------------------------------------------------


def test_next_lists_utc_and_local_slots_after_a_naive_time_in_the_zone() -> None:
    result = invoke("next", "0 30 2 * * *", "--tz", "Europe/Berlin", "--after", "2025-03-29T00:00")
    assert result.exit_code == 0, result.output
    assert "2025-03-29T01:30:00Z" in result.output  # 02:30 CET
    assert "2025-03-30T01:00:00Z" in result.output  # 02:30 does not exist: 03:00 CEST
    assert "02:30 does not exist; fired at 03:00 after the gap" in result.output
    assert result.output.count("Z ") == 10


def test_next_marks_both_passes_of_a_repeated_hour() -> None:
    result = invoke(
        "next", "*/30 * * * *", "--tz", "Europe/Berlin", "--after", "2025-10-26T01:00", "-n", "5"
    )
    assert result.exit_code == 0, result.output
    assert "first of two 02:00 (fold)" in result.output
    assert "second 02:30 (fold)" in result.output


@pytest.mark.parametrize("after", ["2025-01-01T00:00:00Z", "2025-01-01T01:00:00+01:00"])
def test_next_accepts_times_with_an_offset_as_json(after: str) -> None:
    result = invoke("next", "@daily", "--tz", "America/New_York", "--after", after, "--json")
    assert result.exit_code == 0, result.output
    rows = json.loads(result.output)
    assert len(rows) == 10
    assert rows[0]["utc"] == "2025-01-01T05:00:00Z"  # midnight in New York
    assert rows[0]["local"] == "2025-01-01T00:00:00-05:00"


@pytest.mark.parametrize(
    ("args", "fragment"),
    [
        (["next", "61 * * * *"], "minute field '61'"),
        (["next", "* * * *"], "has 4 fields"),
        (["next", "* * * * *", "--tz", "Mars/Olympus"], "unknown time zone 'Mars/Olympus'"),
        (["next", "* * * * *", "--after", "tomorrow"], "not an ISO 8601 time"),
    ],
)
def test_next_bad_input_is_a_one_line_error(args: list[str], fragment: str) -> None:
    assert_one_line_error(invoke(*args), 2, fragment)


# -- backends ---------------------------------------------------------------------------------


def test_backends_lists_schemes_plugins_and_capabilities(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(plugin_manager().failed, "broken", "ImportError: no module named 'nope'")
    result = invoke("backends")
    assert result.exit_code == 0, result.output
    for text in ("memory://", "sqlite://", "anarchon_sqlite", "leases", "plugin 'broken'"):
        assert text in result.output
    assert "no module named 'nope'" in result.output
    data = json.loads(invoke("backends", "--json").output)
    schemes = {b["scheme"]: b for b in data["backends"]}
    assert schemes["sqlite"]["capabilities"]["leases"] is True
    assert schemes["sqlite"]["plugin"] == "sqlite"
    assert data["failed"] == {"broken": "ImportError: no module named 'nope'"}


# -- history ----------------------------------------------------------------------------------


async def _fill(url: str) -> None:
    async with anarchon.connect(url) as store:
        assert isinstance(store, anarchon.LeaseStore)
        for slot, status in ((SLOT, RunStatus.SUCCEEDED), (SLOT + 60_000, RunStatus.FAILED)):
            request = ClaimRequest(
                job="report",
                slot=slot,
                token=new_token(),
                instance="host:1:abcd",
                lease_ms=60_000,
                max_late_ms=10**13,  # the slots are in the future or past: never late here
                attempts=3,
            )
            assert (await store.claim(request)).won
            error = "ValueError: bad row" if status is RunStatus.FAILED else None
            assert await store.finish("report", slot, request.token, status, error)


def test_history_shows_runs_newest_first(in_tmp: Path) -> None:
    url = f"sqlite:///{in_tmp / 'h.db'}"
    asyncio.run(_fill(url))
    result = invoke("history", url, "report")
    assert result.exit_code == 0, result.output
    assert result.output.index("2027-01-15T08:01:00Z") < result.output.index("2027-01-15T08:00:00Z")
    for text in ("succeeded", "failed", "host:1:abcd", "ValueError: bad row"):
        assert text in result.output
    rows = json.loads(invoke("history", url, "report", "--json", "--limit", "1").output)
    assert [(r["slot"], r["status"], r["attempt"]) for r in rows] == [
        ("2027-01-15T08:01:00Z", "failed", 1)
    ]
    assert "no runs of job 'other'" in invoke("history", url, "other").output


def test_history_errors(in_tmp: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    assert_one_line_error(invoke("history", "nowhere", "job"), 2, "has no scheme")
    assert_one_line_error(invoke("history", "sqlite:///x.db", "bad job"), 2, "bad job")
    missing = invoke("history", "sqlite:///missing.db", "job")
    assert_one_line_error(missing, 5, "no SQLite database file", str(in_tmp / "missing.db"))
    assert not (in_tmp / "missing.db").exists()
    (in_tmp / "junk.db").write_text("not a database")
    assert_one_line_error(invoke("history", "sqlite:///junk.db", "job"), 4, "junk.db")
    url = f"sqlite:///{in_tmp / 'h.db'}"
    asyncio.run(_fill(url))
    bad_since = invoke("history", url, "report", "--since", "yesterday")
    assert_one_line_error(bad_since, 2, "--since 'yesterday' is not an ISO 8601 time")
    assert "--after" not in bad_since.output


def test_history_store_unavailable_exits_3_without_the_password(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    def down(url: Any, **options: Any) -> Any:
        raise StoreUnavailable(f"cannot reach {url.secret()}: connection refused")

    monkeypatch.setattr("anarchon.cli._inspect.connect", down)
    result = invoke("history", "memory://admin:hunter2@somewhere/x", "job")
    assert_one_line_error(result, 3, "connection refused", "admin:***@")
    assert "hunter2" not in result.output


# -- run --------------------------------------------------------------------------------------

APP = """\
import pathlib
from anarchon import Scheduler

scheduler = Scheduler("sqlite:///run.db", instance="cli-test", grace="5s")

@scheduler.job("* * * * * *", max_late="2s", lease="3s")
def touch() -> None:
    pathlib.Path("ran.txt").write_text("ok")

def make():
    return scheduler

not_a_scheduler = 42
"""


def test_load_scheduler_accepts_an_attribute_or_a_factory(in_tmp: Path) -> None:
    name = module_name()
    (in_tmp / f"{name}.py").write_text(APP)
    scheduler = load_scheduler(f"{name}:scheduler")
    assert load_scheduler(f"{name}:make") is scheduler
    assert load_scheduler(name) is scheduler  # the attribute defaults to `scheduler`


@pytest.mark.parametrize(
    ("target", "fragment"),
    [
        ("no_such_module_here:scheduler", "cannot import module 'no_such_module_here'"),
        ("{name}:missing", "has no attribute 'missing'"),
        ("{name}:not_a_scheduler", "is a int, not an anarchon.Scheduler"),
        ("not a path", "is not a module path"),
    ],
)
def test_run_bad_targets_are_one_line_errors(in_tmp: Path, target: str, fragment: str) -> None:
    name = module_name()
    (in_tmp / f"{name}.py").write_text(APP)
    assert_one_line_error(invoke("run", target.format(name=name)), 2, fragment)


def test_run_unknown_setting_in_pyproject_is_a_one_line_error(in_tmp: Path) -> None:
    (in_tmp / "pyproject.toml").write_text('[tool.anarchon]\nstore = "memory://"\ncolour = 1\n')
    name = module_name()
    (in_tmp / f"{name}.py").write_text("from anarchon import Scheduler\nscheduler = Scheduler()\n")
    assert_one_line_error(
        invoke("run", f"{name}:scheduler"), 2, "unknown setting 'colour'", "pyproject.toml"
    )


def test_run_a_scheduler_without_jobs_is_refused(in_tmp: Path) -> None:
    name = module_name()
    (in_tmp / f"{name}.py").write_text(
        "from anarchon import Scheduler\nscheduler = Scheduler('memory://')\n"
    )
    assert_one_line_error(invoke("run", f"{name}:scheduler"), 2, "has no jobs")


@pytest.mark.processes
def test_run_runs_jobs_and_stops_gracefully_on_sigterm(tmp_path: Path) -> None:
    (tmp_path / "app.py").write_text(APP)
    process = subprocess.Popen(
        [sys.executable, "-m", "anarchon.cli", "run", "app:scheduler"],
        cwd=tmp_path,
        env=subprocess_env(),
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        wait_for(lambda: (tmp_path / "ran.txt").exists() or process.poll() is not None, 20, "a run")
        assert process.poll() is None, process.communicate()
        process.send_signal(signal.SIGTERM)
        _, err = process.communicate(timeout=20)
    finally:
        if process.poll() is None:
            process.kill()
            process.wait()
    assert process.returncode == 0, err
    assert "scheduler cli-test started" in err
    assert "scheduler cli-test stopped" in err
    assert "Traceback" not in err
    history = CliRunner().invoke(
        cli, ["history", f"sqlite:///{tmp_path / 'run.db'}", "touch", "--json"]
    )
    assert "succeeded" in {r["status"] for r in json.loads(history.output)}


# -- certify ----------------------------------------------------------------------------------


def test_certify_delegates_to_the_conformance_kit(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    certify_module = pytest.importorskip("anarchon_conformance.certify")
    calls: list[tuple[str, str | None, Path | None]] = []

    def fake(harness: str, url: str | None, out: Path | None) -> int:
        calls.append((harness, url, out))
        return 1

    monkeypatch.setattr(certify_module, "run_certification", fake)
    result = invoke("certify", "pkg.mod:Harness", "--url", "sqlite:///x.db", "--out", str(tmp_path))
    assert result.exit_code == 1
    assert calls == [("pkg.mod:Harness", "sqlite:///x.db", tmp_path)]


def test_certify_without_the_kit_says_what_to_install(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(sys.modules, "anarchon_conformance.certify", None)
    assert_one_line_error(invoke("certify", "x:H"), 2, "install anarchon-conformance")


# -- demo -------------------------------------------------------------------------------------


def test_demo_refuses_a_db_in_a_missing_directory(tmp_path: Path) -> None:
    result = invoke("demo", "--db", str(tmp_path / "nope" / "demo.db"))
    assert_one_line_error(result, 2, "does not exist")


@pytest.mark.processes
def test_demo_shows_one_winner_per_slot_and_a_takeover_after_kill_9(tmp_path: Path) -> None:
    started = time.monotonic()
    result = subprocess.run(
        [*DEMO, "--instances", "2", "--duration", "6", "--db", str(tmp_path / "demo.db")],
        env=subprocess_env(),
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert result.returncode == 0, result.stdout + result.stderr
    out = result.stdout
    assert re.search(r"^kill -9 instance-\d \(pid \d+\)", out, re.MULTILINE), out
    assert re.search(r"^takeover after kill -9: instance-\d won attempt 2", out, re.MULTILINE)
    assert "(takeover after kill -9 of instance-" in out
    assert re.search(r"^  duplicates      0 ", out, re.MULTILINE), out
    assert re.search(r"^  takeovers       [1-9]", out, re.MULTILINE), out
    assert time.monotonic() - started < 30


@contextlib.contextmanager
def sigint_as_in_a_terminal() -> Iterator[None]:
    """Processes started inside get SIGINT's default action, as a command typed in a terminal
    does, also when this test run ignores SIGINT: a shell without job control (a CI script,
    `nohup`) starts its `&` jobs so, and an ignored signal stays ignored through exec, where
    Python then installs no KeyboardInterrupt. A handled signal is reset to the default by exec,
    so handling it here for a moment is enough."""
    previous = signal.signal(signal.SIGINT, signal.default_int_handler)
    try:
        yield
    finally:
        signal.signal(signal.SIGINT, previous)


def ignored_signals(pid: int) -> set[int]:
    """The signals process `pid` ignores, from /proc (empty where there is no /proc)."""
    try:
        status = Path(f"/proc/{pid}/status").read_text(encoding="ascii")
    except OSError:
        return set()
    for line in status.splitlines():
        if line.startswith("SigIgn:"):
            mask = int(line.split()[1], 16)
            return {n for n in range(1, 65) if mask >> (n - 1) & 1}
    return set()


@pytest.mark.processes
def test_demo_stops_its_instances_on_ctrl_c(tmp_path: Path) -> None:
    with sigint_as_in_a_terminal():
        process = subprocess.Popen(
            [*DEMO, "--instances", "2", "--duration", "60", "--db", str(tmp_path / "demo.db")],
            env=subprocess_env(),
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
    try:
        assert process.stdout is not None
        line = ""
        deadline = time.monotonic() + 20
        while not line.startswith("started ") and time.monotonic() < deadline:
            line = process.stdout.readline()
        pids = [int(p) for p in re.findall(r"pid (\d+)", line)]
        assert len(pids) == 2, line
        assert signal.SIGINT not in ignored_signals(process.pid), "it would not see the Ctrl-C"
        process.send_signal(signal.SIGINT)
        _, err = process.communicate(timeout=20)
    finally:
        if process.poll() is None:
            process.kill()
            process.wait()
        for stream in (process.stdout, process.stderr):
            if stream is not None:
                stream.close()  # also when an assertion failed: an open pipe fails a later test
    assert process.returncode == 130, err
    assert "interrupted; stopped 2 instance(s)" in err
    for pid in pids:
        with pytest.raises(ProcessLookupError):
            os.kill(pid, 0)
