"""Sessions for contributors: `nox -s tests`, `nox -s lint`, `nox -s types`, `nox -s conformance`.

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
def lint(session: nox.Session) -> None:
    _install(session)
    session.run("ruff", "check", ".")
    session.run("ruff", "format", "--check", ".")


@nox.session
def types(session: nox.Session) -> None:
    _install(session)
    session.run("mypy", *(f"{p}/src" for p in PACKAGES))
