"""pytest plugin of the conformance kit: markers, options and the certificate summary.

Inert unless a suite runs: it imports nothing heavy at load time, and prints a certificate only
for test classes whose checks carry the ``anarchon_rule`` marker.
"""

from __future__ import annotations

import os
import re
from collections.abc import Generator
from pathlib import Path
from typing import TYPE_CHECKING

import pytest

from ._rules import MARKER

if TYPE_CHECKING:
    from .certificate import Certificate, TestRecord
    from .tls import CertBundle

__all__ = ["Collector", "anarchon_tls_certs", "collector"]

_KEY = pytest.StashKey["Collector"]()

RESULTS_ENV = "ANARCHON_CERTIFY_RESULTS"
"""Set by `anarchon certify`: a directory to write the certificates to without saying so (it
is temporary; `anarchon certify` writes and names the files of ``--out`` itself)."""
SUITE_ENV = "ANARCHON_CERTIFY_SUITE"
"""Set by `anarchon certify`: the suite name the certificate shows (the harness it was given),
instead of the node id of the test module it writes for pytest."""


class Collector:
    """Test outcomes of every conformance suite in the session, grouped by suite class."""

    def __init__(self) -> None:
        self.rules: dict[str, tuple[str, tuple[str, ...]]] = {}
        """nodeid of a check -> (suite nodeid, rule ids)."""
        self.outcomes: dict[str, tuple[str, str]] = {}
        self.backends: dict[str, tuple[str, str]] = {}
        self.fallback_names: dict[str, str] = {}

    def has_backend(self, suite: str) -> bool:
        return suite in self.backends

    def set_backend(self, suite: str, name: str, server_version: str) -> None:
        self.backends[suite] = (name, server_version)

    def record(self, nodeid: str, outcome: str, reason: str = "") -> None:
        previous = self.outcomes.get(nodeid)
        if previous is not None and previous[0] == "failed":
            return
        if previous is not None and previous[0] == "skipped" and outcome == "passed":
            return
        self.outcomes[nodeid] = (outcome, reason)

    def suites(self) -> list[str]:
        return sorted({suite for suite, _ in self.rules.values()})

    def records(self, suite: str) -> list[TestRecord]:
        from .certificate import TestRecord

        return [
            TestRecord(nodeid=nodeid, rules=rules, outcome=outcome[0], reason=outcome[1])
            for nodeid, (s, rules) in self.rules.items()
            if s == suite and (outcome := self.outcomes.get(nodeid)) is not None
        ]

    def certificates(self) -> list[Certificate]:
        from . import __version__
        from .certificate import build_certificate

        certificates = []
        for suite in self.suites():
            records = self.records(suite)
            if not records:
                continue
            name, server = self.backends.get(
                suite, (self.fallback_names.get(suite, "?"), "unknown")
            )
            certificates.append(
                build_certificate(
                    backend=name,
                    server_version=server,
                    kit_version=__version__,
                    suite=os.environ.get(SUITE_ENV) or suite,
                    records=records,
                )
            )
        return certificates


def collector(config: pytest.Config) -> Collector | None:
    """The session's collector, or None when the plugin is not active."""
    return config.stash.get(_KEY, None)


@pytest.fixture(scope="session")
def anarchon_tls_certs(tmp_path_factory: pytest.TempPathFactory) -> CertBundle:
    """A private CA with a server certificate for 127.0.0.1 and localhost and a client
    certificate, made once per test session (`anarchon_conformance.tls`; needs trustme)."""
    from .tls import CertBundle

    return CertBundle.create(tmp_path_factory.mktemp("anarchon-tls"))


def pytest_addoption(parser: pytest.Parser) -> None:
    group = parser.getgroup("anarchon", "anarchon conformance kit")
    group.addoption(
        "--anarchon-url",
        dest="anarchon_url",
        default=None,
        help="store URL given to the conformance harness (BackendHarness(url))",
    )
    group.addoption(
        "--anarchon-certificate-dir",
        dest="anarchon_certificate_dir",
        default=None,
        help="also write each conformance certificate there as Markdown and JSON",
    )


@pytest.hookimpl(tryfirst=True)
def pytest_configure(config: pytest.Config) -> None:
    config.addinivalue_line(
        "markers", f"{MARKER}(*ids): the anarchon rules (C1, L4, ...) a conformance check certifies"
    )
    config.stash[_KEY] = Collector()
    chosen = config.getoption("hypothesis_profile", default=None)
    from .profiles import PROFILES

    if chosen in PROFILES:
        # Registered before Hypothesis's own plugin loads the profile named on the command line.
        from .profiles import register_profiles

        register_profiles()


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    for item in items:
        marker = item.get_closest_marker(MARKER)
        if marker is None or item.parent is None:
            continue
        found = collector(item.config)
        if found is None:
            return
        suite = item.parent.nodeid
        found.rules[item.nodeid] = (suite, tuple(marker.args))
        harness_class = getattr(getattr(item, "cls", None), "harness_class", None)
        if harness_class is not None:
            found.fallback_names.setdefault(suite, harness_class.__name__)


@pytest.hookimpl(wrapper=True)
def pytest_runtest_makereport(
    item: pytest.Item, call: pytest.CallInfo[None]
) -> Generator[None, pytest.TestReport, pytest.TestReport]:
    report = yield
    found = collector(item.config)
    if found is None or item.nodeid not in found.rules:
        return report
    if report.failed:
        found.record(item.nodeid, "failed")
        rules = found.rules[item.nodeid][1]
        report.sections.append(("anarchon rule", _expected(rules)))
    elif report.skipped:
        longrepr = report.longrepr
        reason = longrepr[2] if isinstance(longrepr, tuple) else str(longrepr)
        found.record(item.nodeid, "skipped", reason)
    elif report.when == "call":
        found.record(item.nodeid, "passed")
    return report


def _expected(rules: tuple[str, ...]) -> str:
    """What the failed check's rules require, in the certificate's words."""
    from ._rules import RULES

    words = {r.id: r.description for r in RULES}
    return "\n".join(f"this check certifies {i}: {words.get(i, '?')}" for i in rules)


def pytest_terminal_summary(
    terminalreporter: pytest.TerminalReporter, exitstatus: int, config: pytest.Config
) -> None:
    found = collector(config)
    if found is None or not found.outcomes:
        return
    out_dir = config.getoption("anarchon_certificate_dir", default=None)
    quiet_dir = os.environ.get(RESULTS_ENV)
    for certificate in found.certificates():
        terminalreporter.write_sep("=", f"anarchon conformance certificate: {certificate.backend}")
        terminalreporter.write_line(certificate.to_text())
        if out_dir:
            written = write_certificate(certificate, Path(out_dir))
            terminalreporter.write_line(f"written: {', '.join(str(p) for p in written)}")
        if quiet_dir:
            write_certificate(certificate, Path(quiet_dir))


def write_certificate(
    certificate: Certificate, directory: Path, stem: str | None = None
) -> list[Path]:
    """Write `certificate` as ``<stem>.md`` and ``<stem>.json`` in `directory` (default stem:
    the backend name and the suite class)."""
    directory.mkdir(parents=True, exist_ok=True)
    if stem is None:
        suite = certificate.suite.rsplit("::", 1)[-1]
        stem = re.sub(r"[^A-Za-z0-9_.-]+", "-", f"{certificate.backend}-{suite}").strip("-")
    paths = [directory / f"{stem}.md", directory / f"{stem}.json"]
    paths[0].write_text(certificate.to_markdown(), encoding="utf-8")
    paths[1].write_text(certificate.to_json(), encoding="utf-8")
    return paths
