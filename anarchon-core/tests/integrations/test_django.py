"""Django: `manage.py anarchon run` in two real processes runs each slot once, through the ORM,
leaving no connection open; SIGTERM hands a running job over; `manage.py check` reports bad
settings with their ids and hints, never a password; `status` and `history` print what the
`anarchon` CLI prints.

The project is `django_project/` (its settings read the environment this file sets: a SQLite
database in tmp_path for the journal, and the store under test). The journal is the test's own
record of what ran, read with plain sqlite3 and checked against the store's ledger.
"""

from __future__ import annotations

import asyncio
import inspect
import json
import os
import signal
import sqlite3
import subprocess
import sys
import time
import uuid
from collections import Counter
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

import anarchon
from anarchon import RunRecord, RunStatus

pytest.importorskip("django")
pytest.importorskip("anarchon_sqlite")

from anarchon.integrations.django import ProjectScheduler, with_fresh_connections
from anarchon.integrations.django._settings import (
    read_project_settings,
    store_for_commands,
)

pytestmark = pytest.mark.processes

PROJECT = Path(__file__).with_name("django_project")
POSTGRES_URL = os.environ.get(
    "ANARCHON_TEST_POSTGRES_URL", "postgresql://postgres@127.0.0.1:5432/test"
)
STARTED = "started with"
"""What `manage.py anarchon run` logs once its scheduler claims."""


class Project:
    """The test project with its database (the journal) in tmp_path, and its processes."""

    def __init__(self, tmp_path: Path, anarchon: dict[str, Any] | None, jobs: str = "") -> None:
        self.tmp = tmp_path
        self.db = tmp_path / "journal.db"
        self.procs: list[subprocess.Popen[str]] = []
        self.logs: dict[int, Path] = {}
        # Nothing of the test's own environment may configure the project: ANARCHON_STORE
        # would satisfy a check, DJANGO_SETTINGS_MODULE would point elsewhere.
        self.env = {
            key: value
            for key, value in os.environ.items()
            if not key.startswith(("ANARCHON_", "DJANGO_", "TEST_DJANGO_"))
        }
        self.env.update(
            TEST_DJANGO_DB=str(self.db), TEST_DJANGO_JOBS=jobs, PYTHONDONTWRITEBYTECODE="1"
        )
        if anarchon is not None:
            self.env["TEST_DJANGO_ANARCHON"] = json.dumps(anarchon)

    def manage(self, *args: str, timeout: float = 120) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            [sys.executable, "manage.py", *args],
            check=False,
            cwd=PROJECT,
            env=self.env,
            capture_output=True,
            text=True,
            timeout=timeout,
        )

    def migrate(self) -> None:
        done = self.manage("migrate", "--run-syncdb", "--verbosity", "0")
        assert done.returncode == 0, done.stderr

    def start(self, count: int) -> list[subprocess.Popen[str]]:
        """`count` processes of ``manage.py anarchon run``, once each one's scheduler started."""
        started = []
        for index in range(count):
            log = self.tmp / f"run-{len(self.procs)}-{index}.log"
            with log.open("w") as stderr:
                proc = subprocess.Popen(
                    [sys.executable, "manage.py", "anarchon", "run"],
                    cwd=PROJECT,
                    env=self.env,
                    stdout=subprocess.DEVNULL,
                    stderr=stderr,
                    text=True,
                )
            self.logs[proc.pid] = log
            self.procs.append(proc)
            started.append(proc)
        for proc in started:
            self.wait_for(
                lambda proc=proc: (
                    STARTED in self.logs[proc.pid].read_text() or proc.poll() is not None
                ),
                90,
                f"process {proc.pid} to start",
            )
            assert proc.poll() is None, f"process {proc.pid} exited: {self.log_tail()}"
        return started

    def log_tail(self) -> str:
        return "\n".join(f"{pid}: {p.read_text()[-3000:]}" for pid, p in self.logs.items())

    def journal(self, job: str) -> list[tuple[int, int, int, str, bool, float]]:
        """(slot, attempt, pid, event, left_open, at) of every journaled run of `job`."""
        if not self.db.exists():
            return []
        db = sqlite3.connect(self.db, timeout=30)
        try:
            return [
                (slot, attempt, pid, event, bool(left_open), at)
                for slot, attempt, pid, event, left_open, at in db.execute(
                    "SELECT slot, attempt, pid, event, left_open, at FROM ticks_tick "
                    "WHERE job = ? ORDER BY id",
                    (job,),
                )
            ]
        finally:
            db.close()

    def wait_for(self, condition: Callable[[], bool], timeout: float, what: str) -> None:
        deadline = time.monotonic() + timeout
        while not condition():
            if time.monotonic() > deadline:
                pytest.fail(f"timed out after {timeout} s waiting for {what}\n{self.log_tail()}")
            time.sleep(0.05)

    def stop(self) -> list[int]:
        """SIGTERM to every process still running; their exit codes."""
        for proc in self.procs:
            if proc.poll() is None:
                proc.send_signal(signal.SIGTERM)
        return [proc.wait(30) for proc in self.procs]

    def kill(self) -> None:
        for proc in self.procs:
            if proc.poll() is None:
                proc.kill()
            proc.wait()


def ledger(url: str, job: str) -> list[RunRecord]:
    async def read() -> list[RunRecord]:
        async with anarchon.connect(url) as store:
            return await store.history(job, 1000)

    return asyncio.run(read())


def _postgres_answers() -> bool:
    try:
        import psycopg
    except ImportError:
        return False
    try:
        psycopg.connect(POSTGRES_URL, connect_timeout=5).close()
    except psycopg.Error:
        return False
    return True


@pytest.fixture(params=["sqlite", pytest.param("postgresql", marks=pytest.mark.services)])
def store_url(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[str]:
    if request.param == "sqlite":
        yield f"sqlite:///{tmp_path / 'store.db'}"
        return
    pytest.importorskip("anarchon_postgres")
    if not _postgres_answers():
        pytest.skip(
            f"PostgreSQL at {POSTGRES_URL} does not answer (set ANARCHON_TEST_POSTGRES_URL)"
        )
    from anarchon_postgres import testing

    schema = f"dj_{uuid.uuid4().hex[:12]}"
    yield f"{POSTGRES_URL}?schema={schema}"
    testing.drop(POSTGRES_URL, schema)


@pytest.fixture
def projects(tmp_path: Path) -> Iterator[Callable[..., Project]]:
    made: list[Project] = []

    def make(anarchon: dict[str, Any] | None, jobs: str = "") -> Project:
        project = Project(tmp_path, anarchon, jobs)
        made.append(project)
        return project

    yield make
    for project in made:
        project.kill()


# -- two processes ------------------------------------------------------------------------------


def test_two_processes_run_each_slot_once_and_the_commands_show_it(
    projects: Callable[..., Project], store_url: str, tmp_path: Path
) -> None:
    project = projects({"store": store_url, "grace": "5s", "prefix": "shop"}, jobs="ticks")
    project.migrate()
    project.start(2)
    both_up = (int(time.time()) + 1) * 1000
    for job in ("tick", "atick"):
        project.wait_for(
            lambda job=job: len({row[0] for row in project.journal(job) if row[0] >= both_up}) >= 5,
            60,
            f"5 slots of {job} with both processes up",
        )
    procs = project.procs
    assert project.stop() == [0, 0], project.log_tail()
    at_exit = [json.loads((tmp_path / f"exit-{p.pid}.json").read_text()) for p in procs]
    assert {job for report in at_exit for job in report} == {"tick", "atick"}
    assert not any(left_open for report in at_exit for left_open in report.values()), at_exit

    # The settings' prefix is the store's: the CLI and the ledger are given it in the URL.
    store = f"{store_url}{'&' if '?' in store_url else '?'}prefix=shop"
    for job in ("tick", "atick"):
        rows = project.journal(job)
        slots = [row[0] for row in rows]
        twice = [slot for slot, n in Counter(slots).items() if n > 1]
        assert not twice, f"{job}: slots run twice: {twice}"
        # The ledger: every slot since both were up has its record (a slot both processes
        # reached too late would be recorded skipped, not lost), and what ran is what succeeded.
        records = ledger(store, job)
        window = set(range(both_up, max(slots) + 1, 1000))
        missing = window - {r.slot for r in records}
        assert not missing, f"{job}: slots without a record: {sorted(missing)}"
        succeeded = {r.slot for r in records if r.status is RunStatus.SUCCEEDED}
        assert set(slots) == succeeded, f"{job}: the journal and the store's ledger disagree"
        # Each run closes its connections (close_old_connections), so a run never finds the
        # connection of the previous one open; that needs a process with two runs to look.
        assert max(Counter(row[2] for row in rows).values()) >= 2
        assert not [row for row in rows if row[4]], f"{job}: a run left its connection open"

    args = ("tick", "--limit", "3")
    history = project.manage("anarchon", "history", *args)
    assert history.returncode == 0, history.stderr
    cli = subprocess.run(
        [sys.executable, "-m", "anarchon.cli", "history", store, *args],
        check=False,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert cli.returncode == 0, cli.stderr
    assert history.stdout == cli.stdout
    assert "succeeded" in history.stdout

    status = project.manage("anarchon", "status", "--once")
    assert status.returncode == 0, status.stderr
    cells = [line.split("│")[1].strip() for line in status.stdout.splitlines() if "│" in line]
    assert {"tick", "atick"} <= set(cells), status.stdout

    as_json = project.manage("anarchon", "status", "--json", "--job", "tick")
    assert as_json.returncode == 0, as_json.stderr
    shown = json.loads(as_json.stdout)
    assert [job["job"] for job in shown["jobs"]] == ["tick"]
    assert "succeeded" in {run["status"] for run in shown["jobs"][0]["latest"]}


# -- SIGTERM ------------------------------------------------------------------------------------


def test_sigterm_hands_the_running_job_over_at_once(
    projects: Callable[..., Project], tmp_path: Path
) -> None:
    url = f"sqlite:///{tmp_path / 'store.db'}"
    project = projects({"store": url, "grace": "300ms"}, jobs="long")
    project.migrate()
    procs = project.start(2)
    # Runs start from a slot both processes claim at its fire time, so the loser is a backup.
    (tmp_path / "gate").write_text(str((int(time.time()) + 2) * 1000))
    project.wait_for(lambda: bool(project.journal("long")), 30, "the first run of long")
    slot, _, winner, event, _, _ = project.journal("long")[0]
    assert event == "started"
    stopped_at = time.time()
    os.kill(winner, signal.SIGTERM)

    def taken_over() -> list[tuple[int, int, int, str, bool, float]]:
        return [r for r in project.journal("long") if r[0] == slot and r[1] == 2]

    project.wait_for(lambda: len(taken_over()) == 2, 40, "attempt 2 to start and finish")
    (_, _, backup, _, _, at), (_, _, _, finished, _, _) = taken_over()
    assert backup != winner
    assert finished == "finished"
    # The lease is 20 s, renewed every second: without the release, no takeover before 20 s.
    assert at - stopped_at < 10, "the backup waited for the 20 s lease instead of the release"
    assert next(p for p in procs if p.pid == winner).wait(15) == 0
    record = next(r for r in ledger(url, "long") if r.slot == slot)
    assert (record.status, record.attempt) == (RunStatus.SUCCEEDED, 2)
    assert f":{backup}:" in record.holder
    assert project.stop() == [0, 0]


# -- checks -------------------------------------------------------------------------------------


def test_check_reports_each_bad_setting_with_its_id_and_hint(
    projects: Callable[..., Project], tmp_path: Path
) -> None:
    secret = "hunter2-in-the-url"
    bad = projects(
        {
            "store": f"postgresql://app:{secret}@127.0.0.1:1/app?bogus=1",
            "stroe": "sqlite:///x.db",
            "grace": "soon",
        },
        jobs="broken",
    )
    checked = bad.manage("check")
    assert checked.returncode == 1
    out = checked.stderr
    assert secret not in out + checked.stdout
    for expected in (
        "(anarchon.E003) invalid options for postgresql://: unknown option bogus",
        "(anarchon.E004) settings.ANARCHON has unknown key(s): 'stroe'",
        "HINT: Did you mean 'store'?",
        "(anarchon.E005) grace (in settings.ANARCHON) 'soon' is not a duration",
        "ticks.anarchon_jobs.broken: (anarchon.E006) cron expression '61 * * * *'",
        "System check identified 4 issues",
    ):
        assert expected in out, out
    # `run` checks first, and does not start.
    refused = bad.manage("anarchon", "run")
    assert refused.returncode == 1
    assert "anarchon.E006" in refused.stderr

    unset = projects(None).manage("check")
    assert unset.returncode == 1
    assert "(anarchon.E001) settings.ANARCHON is not set" in unset.stderr
    assert 'HINT: Add ANARCHON = {"store": ' in unset.stderr


def test_a_good_project_checks_clean_and_run_wants_jobs(
    projects: Callable[..., Project], tmp_path: Path
) -> None:
    project = projects({"store": f"sqlite:///{tmp_path / 'store.db'}"})
    checked = project.manage("check")
    assert checked.returncode == 0, checked.stderr
    assert "System check identified no issues" in checked.stdout
    idle = project.manage("anarchon", "run")
    assert idle.returncode == 2
    assert "no jobs are declared" in idle.stderr
    assert "anarchon_jobs.py" in idle.stderr
    bad_option = project.manage("anarchon", "history", "tick", "--bogus")
    assert bad_option.returncode == 2
    assert "No such option '--bogus'" in bad_option.stderr
    # Read-only commands on a store no scheduler has used yet: exit 5, and nothing created.
    unused = project.manage("anarchon", "status", "--once")
    assert unused.returncode == 5, unused.stderr
    assert f"no SQLite database file {tmp_path / 'store.db'}" in unused.stderr
    assert not (tmp_path / "store.db").exists()


# -- settings, in this process ------------------------------------------------------------------


def ids(value: object, environ: dict[str, str] | None = None) -> list[str]:
    return [p.id for p in read_project_settings(value, environ=environ or {}).problems]


def test_settings_problems_each_have_their_id() -> None:
    assert ids(["sqlite:///x.db"]) == ["anarchon.E001"]
    assert ids({}) == ["anarchon.E002"]
    assert ids({}, {"ANARCHON_STORE": "sqlite:///x.db"}) == []
    assert ids({"store": 5}) == ["anarchon.E003"]
    assert ids({"store": "no-scheme"}) == ["anarchon.E003"]
    assert ids({"store": "nosuch://host"}) == ["anarchon.E003"]
    assert ids({"store": "sqlite:///x.db", "colour": 1}) == ["anarchon.E004"]
    assert ids({"store": "sqlite:///x.db", "prefix": "a b"}) == ["anarchon.E005"]
    assert ids({"store": "sqlite:///x.db", "health_port": 70000}) == ["anarchon.E005"]
    assert ids({"store": "sqlite:///x.db?prefix=one", "prefix": "two"}) == ["anarchon.E005"]
    assert ids({"store": "sqlite:///x.db", "grace": "2s", "catch_up": "all"}) == []


def test_settings_become_the_scheduler_settings() -> None:
    project = read_project_settings(
        {"store": "sqlite:///x.db", "grace": "2s", "prefix": "shop", "instance": None},
        environ={},
    )
    assert project.problems == ()
    assert project.scheduler_kwargs == {"store": "sqlite:///x.db", "grace": "2s", "prefix": "shop"}
    assert project.settings is not None
    assert project.settings.grace_ms == 2000
    assert store_for_commands(project.settings) == "sqlite:///x.db?prefix=shop"


def test_store_errors_never_show_the_password() -> None:
    secret = "s3cret-pass-word"
    for store in (
        f"postgresql://app:{secret}@db/app?bogus=1",
        f"nosuch://app:{secret}@db/app",
        f"postgresql://app:{secret}@db:99999/app",
    ):
        problems = read_project_settings({"store": store}, environ={}).problems
        assert [p.id for p in problems] == ["anarchon.E003"], store
        assert secret not in problems[0].message


# -- declarations, in this process --------------------------------------------------------------


def test_declarations_are_checked_and_kept_not_raised() -> None:
    jobs = ProjectScheduler()

    @jobs.job("* * * * *")
    def report() -> None: ...

    @jobs.job("*/5 * * * *", name="report")
    def other() -> None: ...

    @jobs.job("99 * * * *")
    def bad() -> None: ...

    first, twice, broken = jobs.declared
    assert first.error is None
    assert first.spec is not None
    assert first.where.endswith(".report")
    assert twice.error == "job 'report' is declared twice; give one of them name=..."
    assert broken.error is not None
    assert "'99'" in broken.error
    assert report.__name__ == "report"  # the decorator gives the function back as it was


def test_interval_jobs_and_timeouts_are_declared_like_on_a_scheduler() -> None:
    jobs = ProjectScheduler()

    @jobs.job(every="30s", offset="5s", timeout="10s")
    def poll() -> None: ...

    @jobs.job("* * * * *", every="30s")
    def both() -> None: ...

    poll_job, both_job = jobs.declared
    assert poll_job.error is None and poll_job.spec is not None
    assert poll_job.cron is None
    assert poll_job.spec.schedule.text == "every 30s offset 5s"
    assert poll_job.spec.timeout_ms == 10_000
    assert both_job.error is not None and "every" in both_job.error


def test_the_connection_wrapper_keeps_what_the_scheduler_reads() -> None:
    def sync_job(run: anarchon.Run) -> int:
        return run.attempt

    async def async_job() -> None: ...

    wrapped_sync = with_fresh_connections(sync_job)
    wrapped_async = with_fresh_connections(async_job)
    # The name, whether it takes a `Run`, and sync or async are read from the function.
    assert wrapped_sync.__name__ == "sync_job"
    assert list(inspect.signature(wrapped_sync).parameters) == ["run"]
    assert not inspect.iscoroutinefunction(wrapped_sync)
    assert inspect.iscoroutinefunction(wrapped_async)
    assert list(inspect.signature(wrapped_async).parameters) == []
