"""The distributions as users get them: every wheel and sdist of the workspace, built with
``uv build --all-packages --no-sources`` (the way a release builds them), then read back.

- No test-only module ships in a runtime wheel: no tests, conftest, server launchers, race or
  fleet workers, proxies or TLS fronts. The kit (anarchon-conformance) and the shared test helpers
  (anarchon-test-support) are test tools by nature and exempt.
- Every file of each package's source tree is in its wheel and its sdist (modules, ``.lua`` and
  ``.sql`` bodies, ``py.typed``), and nothing else.
- Every distribution carries the MIT LICENSE, classifiers, project URLs and a real README whose
  links work on PyPI (absolute); `anarchon` brings `anarchon-sqlite`, its default store.

``ANARCHON_DIST=dir`` checks the distributions already built there (``scripts/wheels`` builds
them once and runs this file, then smoke-tests them in a fresh venv); without it the fixture
builds them into a temporary directory (about 5 s).
"""

from __future__ import annotations

import email.parser
import os
import re
import shutil
import subprocess
import sys
import tarfile
import zipfile
from collections.abc import Iterator
from email.message import Message
from pathlib import Path

import attrs
import pytest

if sys.version_info >= (3, 11):
    import tomllib
else:  # pragma: no cover - Python 3.10
    import tomli as tomllib

ROOT = Path(__file__).resolve().parent.parent

TEST_TOOLS = {"anarchon-conformance", "anarchon-test-support"}
"""Distributions whose purpose is testing: their test-support modules are the product."""

TEST_ONLY_DIRS = {"tests", "test", "testdata", "fixtures"}
TEST_ONLY_STEM = re.compile(
    r"""^(conftest|test_.*|.*_test|.*_tests)$    # pytest's files
      | (^|_)(servers?|proxy|proxies|fronts?|helpers|fleet|race)(_|$)  # launchers, fronts, aids
      | worker$                                    # scripts that tests start as processes
    """,
    re.VERBOSE,
)
RUNTIME_EXCEPTIONS = {
    "anarchon/cli/_demo_worker.py": "one instance of `anarchon demo`, started by the demo",
    "anarchon_sqlite/_worker.py": "the thread that owns each SQLite connection",
    "anarchon/_fleet.py": "the fleet's members and rendezvous contenders (DESIGN section 12)",
    "anarchon/_runtime/fleet.py": "the scheduler's heartbeat and contender roles",
    "anarchon/_runtime/fleet_fallback.py": "the later claims of slots this instance watches",
    "anarchon_redis/_server.py": "the Redis server's persistence and run id, read by the store",
}
"""Runtime modules whose names look like test support, each with what it is."""

IGNORED = re.compile(r"/__pycache__/|\.py[co]$|\.db(-wal|-shm)?$")
"""Files the build leaves out (.gitignore): bytecode, and SQLite files a local run left behind."""

RELATIVE_LINK = re.compile(r"\]\((?!https?://|mailto:|#)([^)\s]+)")
"""A Markdown link that PyPI cannot follow: a path into the repository."""


@attrs.frozen
class Member:
    """One workspace member, as its pyproject.toml declares it."""

    folder: Path
    name: str
    version: str
    packages: tuple[str, ...]  # the import packages' folders, relative to `folder`
    private: bool

    @property
    def stem(self) -> str:
        return f"{self.name.replace('-', '_')}-{self.version}"

    def source_files(self) -> set[str]:
        """Each file of the import packages, relative to the wheel's root."""
        files = set()
        for package in self.packages:
            top = self.folder / package
            for path in top.rglob("*"):
                if path.is_file() and not IGNORED.search(path.as_posix()):
                    files.add(path.relative_to(top.parent).as_posix())
        return files


def _members() -> list[Member]:
    root = tomllib.loads((ROOT / "pyproject.toml").read_text())
    members = []
    for folder in root["tool"]["uv"]["workspace"]["members"]:
        data = tomllib.loads((ROOT / folder / "pyproject.toml").read_text())
        project = data["project"]
        members.append(
            Member(
                folder=ROOT / folder,
                name=project["name"],
                version=project["version"],
                packages=tuple(data["tool"]["hatch"]["build"]["targets"]["wheel"]["packages"]),
                private="Private :: Do Not Upload" in project.get("classifiers", []),
            )
        )
    return members


MEMBERS = _members()
PUBLISHED = [m for m in MEMBERS if not m.private]


def _uv() -> str | None:
    local = ROOT / ".cache" / "uv-tool" / "bin" / "uv"
    return str(local) if local.exists() else shutil.which("uv")


@pytest.fixture(scope="session")
def dist(tmp_path_factory: pytest.TempPathFactory) -> Path:
    given = os.environ.get("ANARCHON_DIST")
    if given:
        return Path(given)
    uv = _uv()
    if uv is None:
        pytest.skip("uv is not installed (bash scripts/dev installs it into .cache/uv-tool)")
    out = tmp_path_factory.mktemp("dist")
    subprocess.run(
        [uv, "build", "--all-packages", "--no-sources", "--quiet", "--out-dir", str(out)],
        cwd=ROOT,
        check=True,
        timeout=240,
    )
    return out


def _wheel(dist: Path, member: Member) -> zipfile.ZipFile:
    path = dist / f"{member.stem}-py3-none-any.whl"
    assert path.exists(), (
        f"no wheel {path.name} in {dist}: {sorted(p.name for p in dist.iterdir())}"
    )
    return zipfile.ZipFile(path)


def _metadata(dist: Path, member: Member) -> Message:
    with _wheel(dist, member) as wheel:
        text = wheel.read(f"{member.stem}.dist-info/METADATA").decode()
    return email.parser.Parser().parsestr(text)


def _wheel_files(dist: Path, member: Member) -> Iterator[str]:
    with _wheel(dist, member) as wheel:
        for name in wheel.namelist():
            if not name.startswith(f"{member.stem}.dist-info/"):
                yield name


def _test_only(path: str) -> bool:
    parts = path.split("/")
    stem = parts[-1].rsplit(".", 1)[0]
    return bool(TEST_ONLY_DIRS & set(parts[:-1])) or bool(TEST_ONLY_STEM.search(stem))


@pytest.mark.parametrize(
    ("path", "test_only"),
    [
        ("anarchon_redis/_servers.py", True),
        ("anarchon_redis/tests/test_store.py", True),
        ("anarchon_postgres/_tls_front.py", True),
        ("anarchon_postgres/tls_proxy.py", True),
        ("anarchon_nats/race_worker.py", True),
        ("anarchon_core/conftest.py", True),
        ("anarchon_x/fleet_worker.py", True),
        ("anarchon_redis/testing.py", False),  # the backdoors the kit uses: public by design
        ("anarchon_redis/_scripts/lease.lua", False),
        ("anarchon_postgres/_store.py", False),
        ("anarchon/_runtime/dispatcher.py", False),
    ],
)
def test_the_test_only_rule(path: str, test_only: bool) -> None:
    assert _test_only(path) is test_only


@pytest.mark.parametrize(
    "member", [m for m in MEMBERS if m.name not in TEST_TOOLS], ids=lambda m: m.name
)
@pytest.mark.processes
def test_no_test_only_module_in_a_runtime_wheel(dist: Path, member: Member) -> None:
    shipped = [
        path
        for path in _wheel_files(dist, member)
        if _test_only(path) and path not in RUNTIME_EXCEPTIONS
    ]
    assert not shipped, (
        f"{member.name}'s wheel ships test support {shipped}: move it to the package's tests/ "
        "(or its own testing module if the kit needs it), or name what it is at runtime in "
        "RUNTIME_EXCEPTIONS"
    )


def test_the_runtime_exceptions_still_exist() -> None:
    sources = {path for m in MEMBERS for path in m.source_files()}
    assert set(RUNTIME_EXCEPTIONS) <= sources, set(RUNTIME_EXCEPTIONS) - sources


@pytest.mark.parametrize("member", MEMBERS, ids=lambda m: m.name)
@pytest.mark.processes
def test_the_wheel_holds_the_source_tree(dist: Path, member: Member) -> None:
    """Modules, data files (``.lua``, ``.sql``) and ``py.typed``: all of them, nothing else."""
    shipped = set(_wheel_files(dist, member))
    expected = member.source_files()
    assert shipped == expected, (
        f"missing from the wheel: {sorted(expected - shipped)}; "
        f"not in the source tree: {sorted(shipped - expected)}"
    )
    for package in member.packages:
        top = package.rsplit("/", 1)[-1]
        assert f"{top}/py.typed" in shipped


@pytest.mark.parametrize("member", MEMBERS, ids=lambda m: m.name)
@pytest.mark.processes
def test_the_sdist_builds_the_wheel(dist: Path, member: Member) -> None:
    path = dist / f"{member.stem}.tar.gz"
    assert path.exists(), f"no sdist {path.name}"
    with tarfile.open(path) as sdist:
        names = {n.split("/", 1)[1] for n in sdist.getnames() if "/" in n}
    for needed in ("pyproject.toml", "README.md", "LICENSE", "PKG-INFO"):
        assert needed in names, f"{member.name}'s sdist lacks {needed}"
    parents = {Path(package).parent.as_posix() for package in member.packages}
    sources = {f"{parent}/{f}" for parent in parents for f in member.source_files()}
    assert sources <= names, f"missing from the sdist: {sorted(sources - names)}"


@pytest.mark.parametrize("member", MEMBERS, ids=lambda m: m.name)
@pytest.mark.processes
def test_the_license_ships(dist: Path, member: Member) -> None:
    license_text = (ROOT / "LICENSE").read_text()
    assert (member.folder / "LICENSE").read_text() == license_text, (
        f"{member.folder.name}/LICENSE differs from the repository's LICENSE: copy it again"
    )
    with _wheel(dist, member) as wheel:
        shipped = wheel.read(f"{member.stem}.dist-info/licenses/LICENSE").decode()
    assert shipped == license_text
    assert _metadata(dist, member)["License-Expression"] == "MIT"


@pytest.mark.parametrize("member", PUBLISHED, ids=lambda m: m.name)
@pytest.mark.processes
def test_the_metadata_reads_well_on_pypi(dist: Path, member: Member) -> None:
    meta = _metadata(dist, member)
    classifiers = meta.get_all("Classifier") or []
    for needed in ("Development Status :: 3 - Alpha", "Typing :: Typed"):
        assert needed in classifiers
    assert any(c.startswith("Topic :: ") for c in classifiers)
    urls = meta.get_all("Project-URL") or []
    assert urls, f"{member.name} declares no project URL"
    for entry in urls:
        label, url = entry.split(", ", 1)
        assert url.startswith("https://"), f"{member.name}: project URL {label!r} is {url!r}"
    readme = meta.get_payload()
    assert isinstance(readme, str)
    assert meta["Description-Content-Type"] == "text/markdown"
    assert len(readme) > 800, f"{member.name}'s README is a stub ({len(readme)} characters)"
    extra = member.name.removeprefix("anarchon-")
    installs = (f"pip install {member.name}", f'pip install "anarchon[{extra}]"')
    assert any(i in readme for i in installs), f"{member.name}'s README lacks {installs[0]!r}"
    assert "```python" in readme, f"{member.name}'s README shows no use"
    relative = RELATIVE_LINK.findall(readme)
    assert not relative, f"{member.name}'s README links into the repository: {relative}"


@pytest.mark.processes
def test_anarchon_alone_brings_its_default_store(dist: Path) -> None:
    core = next(m for m in MEMBERS if m.name == "anarchon")
    requires = _metadata(dist, core).get_all("Requires-Dist") or []
    assert "anarchon-sqlite==0.1.0" in requires
