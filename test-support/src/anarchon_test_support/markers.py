"""The markers that keep the fast selection fast, and the check that keeps them honest.

- ``services``: the test needs a server (PostgreSQL, Redis, RabbitMQ, NATS, MariaDB), running or
  started from an installed binary.
- ``processes``: the test starts OS processes (workers, a fleet, the CLI or an example in a
  subprocess, a build).
- ``slow``: the test takes a second or more by design on an idle machine (it waits on the wall
  clock for slots, leases or outages, or runs through many generated examples).

``pytest -m "not services and not processes and not slow"`` runs the rest, the fast ones (no
server, no process, no waiting): some 1,300 tests in about a minute on a busy 2-core machine.
Backend packages whose every test needs a server mark them all from their ``conftest.py``::

    def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
        mark_services(items, Path(__file__).parent)

Elsewhere a test, a parameter or a module carries the marker itself.

Loaded as a pytest plugin (``-p anarchon_test_support.markers``, in the root ``addopts``), this
module fails a test that starts an OS process while carrying neither ``processes`` nor
``services``: it listens to Python's audit events (``subprocess.Popen``, ``os.fork`` ...), so it sees
every process a test starts, also through a helper, a fixture or the code under test. Time is
only hinted at, since a loaded machine slows everything: the summary names the unmarked tests
whose call took ``SLOW_HINT_S`` or more.
"""

from __future__ import annotations

import sys
from collections.abc import Collection, Generator, Iterable
from pathlib import Path

import pytest

__all__ = ["PROCESSES", "SERVICES", "SLOW", "mark_services", "mark_tests"]

SERVICES = "services"
PROCESSES = "processes"
SLOW = "slow"
FAST_SELECTION = f"not {SERVICES} and not {PROCESSES} and not {SLOW}"
"""The ``-m`` expression of the fast tests."""

SLOW_HINT_S = 3.0
"""An unmarked test whose call takes this long is named in the summary: a candidate for ``slow``."""

PROCESS_EVENTS = frozenset(
    {"subprocess.Popen", "os.fork", "os.forkpty", "os.posix_spawn", "os.spawn", "os.system"}
)
"""Python's audit events that start a process. ``multiprocessing`` with the spawn or forkserver
method starts its processes without one (``_posixsubprocess``), so it is not seen here; no test
uses it, and ``anarchon-core/tests/test_markers.py`` keeps it so."""


def mark_services(items: Iterable[pytest.Item], folder: Path) -> None:
    """Give every collected test under `folder` the ``services`` marker.

    A conftest's ``pytest_collection_modifyitems`` sees every item of the session, not only its
    folder's, hence the filter."""
    for item in items:
        if item.path.is_relative_to(folder):
            item.add_marker(SERVICES)


def mark_tests(
    items: Iterable[pytest.Item], folder: Path, marker: str, names: Collection[str]
) -> None:
    """Give the tests under `folder` whose function is named in `names` the `marker`: for tests
    defined elsewhere (the conformance kit's checks), which cannot carry it themselves."""
    for item in items:
        name = getattr(item, "originalname", item.name)
        if name in names and item.path.is_relative_to(folder):
            item.add_marker(marker)


class _ProcessWatch:
    """Records the processes started while an unmarked test runs."""

    def __init__(self) -> None:
        self.watching = False
        self.started: list[str] = []

    def __call__(self, event: str, args: tuple[object, ...]) -> None:
        # Called for every audit event of the interpreter, from any thread: keep it cheap.
        if self.watching and event in PROCESS_EVENTS:
            self.started.append(f"{event} {args[:2]!r}"[:200])


_watch = _ProcessWatch()
_slow_unmarked: list[tuple[str, float]] = []
_installed: list[_ProcessWatch] = []


def pytest_configure(config: pytest.Config) -> None:
    if not _installed:  # audit hooks cannot be removed: one per interpreter, for every session
        sys.addaudithook(_watch)
        _installed.append(_watch)


@pytest.hookimpl(wrapper=True)
def pytest_runtest_protocol(
    item: pytest.Item, nextitem: pytest.Item | None
) -> Generator[None, object, object]:
    _watch.started.clear()
    _watch.watching = not any(item.get_closest_marker(m) for m in (PROCESSES, SERVICES))
    try:
        return (yield)
    finally:
        _watch.watching = False
        _watch.started.clear()


@pytest.hookimpl(wrapper=True)
def pytest_runtest_makereport(
    item: pytest.Item, call: pytest.CallInfo[None]
) -> Generator[None, pytest.TestReport, pytest.TestReport]:
    report = yield
    if (
        call.when == "call"
        and report.duration >= SLOW_HINT_S
        and not any(item.get_closest_marker(m) for m in (SERVICES, PROCESSES, SLOW))
    ):
        _slow_unmarked.append((item.nodeid, report.duration))
    if call.when == "teardown" and _watch.started and report.passed:
        report.outcome = "failed"
        report.longrepr = (
            f"{item.nodeid} started an OS process ({_watch.started[0]}) but carries neither "
            f"pytest.mark.{PROCESSES} nor pytest.mark.{SERVICES}: mark it `{PROCESSES}` (a "
            "decorator, a parameter's marks or the module's pytestmark), so that the fast "
            f'selection -m "{FAST_SELECTION}" starts none (anarchon_test_support.markers)'
        )
    return report


def pytest_terminal_summary(terminalreporter: pytest.TerminalReporter) -> None:
    if not _slow_unmarked:
        return
    terminalreporter.write_sep("-", f"unmarked tests that took {SLOW_HINT_S:g} s or more")
    for nodeid, seconds in _slow_unmarked:
        terminalreporter.write_line(f"{seconds:6.1f} s  {nodeid}")
    terminalreporter.write_line(
        f"If a test waits on the clock by design, mark it `{SLOW}` so that the fast selection "
        f'-m "{FAST_SELECTION}" stays fast (a loaded machine slows every test: check it idle).'
    )
    _slow_unmarked.clear()
