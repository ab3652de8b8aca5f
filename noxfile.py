"""Sessions for contributors: `nox -s tests`, `nox -s lint`, `nox -s types`, `nox -s conformance`,
`nox -s redaction` (the long redaction fuzz), `nox -s input_fuzz` (the long bad-input fuzz),
`nox -s damaged_store` (the long damaged-store fuzz).

CI runs `bash .ci/run`, which does the same through `scripts/dev`."""

from __future__ import annotations

import nox

nox.options.default_venv_backend = "uv"
nox.options.sessions = ["tests", "lint", "types"]

PACKAGES = ["anarchon-core", "anarchon-sqlite", "conformance"]


def _install(session: nox.Session) -> None:
    session.run_install(
        "uv",
        "sync",
        "--all-packages",
        "--locked",
        env={"UV_PROJECT_ENVIRONMENT": session.virtualenv.location},
    )


@nox.session
@nox.parametrize("package", PACKAGES)
def tests(session: nox.Session, package: str) -> None:
    """The tests of one package."""
    _install(session)
    session.run("pytest", package, *session.posargs)


@nox.session
def conformance(session: nox.Session) -> None:
    """Certify every backend in this repository with the conformance kit."""
    _install(session)
    session.run("pytest", "-k", "Conformance", *PACKAGES, *session.posargs)


@nox.session
def redaction(session: nox.Session) -> None:
    """The redaction property test (issue 21) with the long profile: thousands of generated store
    URLs of every scheme, no credential in any error, repr, log record, CLI output or health JSON.
    Needs no server (the stores are refused at a closed loopback port); about 10 minutes."""
    _install(session)
    session.run(
        "pytest",
        "anarchon-core/tests/test_redaction_fuzz.py",
        *session.posargs,
        env={"ANARCHON_HYPOTHESIS_PROFILE": "nightly"},
    )


@nox.session
def input_fuzz(session: nox.Session) -> None:
    """The bad-input fuzz (issue 21) with the long profile: about 36,000 generated inputs to the
    API (cron, durations, claims on memory:// and SQLite, schedulers, store options) and the CLI
    (next, history, status, backends); each works or is refused with one line, never a raw
    exception or exit 1. Needs no server; about 3 minutes."""
    _install(session)
    session.run(
        "pytest",
        "anarchon-core/tests/test_input_fuzz.py",
        *session.posargs,
        env={"ANARCHON_HYPOTHESIS_PROFILE": "nightly"},
    )


@nox.session
def damaged_store(session: nox.Session) -> None:
    """The damaged-store fuzz (issue 21) with the long profile: thousands of generated values
    written over anarchon's rows (raw SQL into SQLite) and read back by `RunRecord.from_row`,
    `history`, ``anarchon history`` and ``anarchon status``: the untouched runs always come back,
    a bad row is named, nothing crashes. Needs no server; a few minutes."""
    _install(session)
    session.run(
        "pytest",
        "anarchon-core/tests/test_damaged_store.py",
        "-k",
        "any_values or any_damage",
        *session.posargs,
        env={"ANARCHON_HYPOTHESIS_PROFILE": "nightly"},
    )


@nox.session
def lint(session: nox.Session) -> None:
    _install(session)
    session.run("ruff", "check", ".")
    session.run("ruff", "format", "--check", ".")


@nox.session
def types(session: nox.Session) -> None:
    _install(session)
    session.run("mypy", *(f"{p}/src" for p in PACKAGES))
