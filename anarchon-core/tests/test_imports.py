"""The import structure: a backend needs only the contract, and no package has an import circle.

``import anarchon.backend`` and ``import anarchon.abc`` must load no runtime module (a backend
needs neither the scheduler nor the CLI). Every installed anarchon package is read with `ast`
(nothing is imported): its module-level imports (not those inside functions, nor under
``if TYPE_CHECKING:``) form a graph that must have no cycle, since a cycle makes the import
order matter and breaks the first import of one of its modules somewhere.
"""

from __future__ import annotations

import ast
import importlib.util
import json
import subprocess
import sys
from collections.abc import Iterator
from importlib.metadata import packages_distributions
from pathlib import Path

import pytest

PACKAGES = [
    "anarchon",
    "anarchon_sqlite",
    "anarchon_redis",
    "anarchon_postgres",
    "anarchon_nats",
    "anarchon_rabbitmq",
    "anarchon_prometheus",
    "anarchon_otel",
    "anarchon_conformance",
    "anarchon_mariadb",
]
"""The import packages of this project; any other installed ``anarchon*`` one is walked too."""

RUNTIME = ("anarchon._runtime", "anarchon.cli", "anarchon.plugins._manager", "pluggy")
"""Modules a backend must not load by importing the contract."""


def _loaded_after(statement: str) -> list[str]:
    """The modules in `sys.modules` of a fresh interpreter after `statement`."""
    out = subprocess.run(
        [
            sys.executable,
            "-c",
            f"{statement}\nimport json, sys\nprint(json.dumps(sorted(sys.modules)))",
        ],
        capture_output=True,
        text=True,
        check=True,
        timeout=60,
    ).stdout
    return list(json.loads(out.splitlines()[-1]))


@pytest.mark.parametrize("module", ["anarchon.backend", "anarchon.abc"])
@pytest.mark.processes
def test_the_contract_loads_no_runtime_module(module: str) -> None:
    loaded = _loaded_after(f"import {module}")
    assert module in loaded
    runtime = [m for m in loaded if m == "anarchon.cli" or m.startswith(RUNTIME)]
    assert not runtime, f"import {module} loads runtime modules: {runtime}"


@pytest.mark.processes
def test_the_runtime_names_load_on_first_use() -> None:
    loaded = _loaded_after("import anarchon\nanarchon.Scheduler")
    assert "anarchon._runtime.scheduler" in loaded
    assert not any(m.startswith("anarchon.cli") for m in loaded), "the CLI is not the runtime"


# -- import cycles ------------------------------------------------------------------------------


def _package_names() -> list[str]:
    found = {name for name in packages_distributions() if name.startswith("anarchon")}
    return sorted(set(PACKAGES) | found)


def _modules(package: str) -> dict[str, Path]:
    """Every module of an installed package, by dotted name (``pkg.sub`` for ``pkg/sub/__init__.py``)."""
    spec = importlib.util.find_spec(package)
    if spec is None or not spec.submodule_search_locations:
        return {}
    modules: dict[str, Path] = {}
    for location in spec.submodule_search_locations:
        root = Path(location)
        for path in sorted(root.rglob("*.py")):
            parts = [package, *path.relative_to(root).with_suffix("").parts]
            if parts[-1] == "__init__":
                parts.pop()
            modules[".".join(parts)] = path
    return modules


def _is_type_checking(test: ast.expr) -> bool:
    return (isinstance(test, ast.Name) and test.id == "TYPE_CHECKING") or (
        isinstance(test, ast.Attribute) and test.attr == "TYPE_CHECKING"
    )


def _module_level(body: list[ast.stmt]) -> Iterator[ast.Import | ast.ImportFrom]:
    """The import statements run when the module is imported: at the top, in top-level
    ``if``/``try``/``with`` blocks and class bodies; not in functions, nor under
    ``if TYPE_CHECKING:`` (its ``else`` runs, so it counts)."""
    for node in body:
        if isinstance(node, (ast.Import, ast.ImportFrom)):
            yield node
        elif isinstance(node, ast.If):
            if not _is_type_checking(node.test):
                yield from _module_level(node.body)
            yield from _module_level(node.orelse)
        elif isinstance(node, ast.Try):
            for block in (node.body, node.orelse, node.finalbody):
                yield from _module_level(block)
            for handler in node.handlers:
                yield from _module_level(handler.body)
        elif isinstance(node, (ast.With, ast.ClassDef)):
            yield from _module_level(node.body)


def _imports(name: str, path: Path, known: set[str]) -> set[str]:
    """The modules of `known` that module `name` imports at module level. ``from pkg import
    name`` imports ``pkg``, and ``pkg.name`` too when that is a module."""
    is_package = path.name == "__init__.py"
    found: set[str] = set()
    for node in _module_level(ast.parse(path.read_text(encoding="utf-8")).body):
        if isinstance(node, ast.Import):
            targets = [alias.name for alias in node.names]
        else:
            base = node.module or ""
            if node.level:
                package = name.split(".")
                if not is_package:
                    package.pop()
                package = package[: len(package) - (node.level - 1)]
                base = ".".join([*package, base] if base else package)
            targets = [base, *(f"{base}.{alias.name}" for alias in node.names)]
        found.update(t for t in targets if t in known and t != name)
    return found


def _graph() -> dict[str, set[str]]:
    paths: dict[str, Path] = {}
    for package in _package_names():
        paths.update(_modules(package))
    known = set(paths)
    return {name: _imports(name, path, known) for name, path in paths.items()}


def _cycle_through(graph: dict[str, set[str]], start: str) -> list[str] | None:
    """A shortest import cycle from `start` back to it, if any (breadth first)."""
    previous: dict[str, str] = {}
    frontier = [start]
    while frontier:
        following = []
        for node in frontier:
            for target in sorted(graph.get(node, ())):
                if target == start:
                    path = [node]
                    while path[-1] != start:
                        path.append(previous[path[-1]])
                    return [start, *reversed(path[:-1]), start]
                if target not in previous:
                    previous[target] = node
                    following.append(target)
        frontier = following
    return None


@pytest.fixture(scope="module")
def graph() -> dict[str, set[str]]:
    return _graph()


def test_the_walk_sees_the_imports(graph: dict[str, set[str]]) -> None:
    """The walk finds what it must: relative imports resolved, submodules imported by name."""
    assert "anarchon.abc" in graph["anarchon.backend"]
    assert "anarchon._claims" in graph["anarchon.abc"]
    assert "anarchon._runtime.dispatcher" in graph["anarchon._runtime.scheduler"]
    # `if TYPE_CHECKING:` and function bodies do not count.
    assert "anarchon._runtime.scheduler" not in graph["anarchon"]


@pytest.mark.parametrize("package", PACKAGES)
def test_no_import_cycle(package: str, graph: dict[str, set[str]]) -> None:
    modules = sorted(name for name in graph if name == package or name.startswith(f"{package}."))
    if not modules:
        pytest.skip(f"{package} is not installed")
    cycles = []
    seen: set[frozenset[str]] = set()
    for module in modules:
        cycle = _cycle_through(graph, module)
        if cycle is not None and frozenset(cycle) not in seen:
            seen.add(frozenset(cycle))
            cycles.append(" -> ".join(cycle))
    assert not cycles, f"import cycles in {package}:\n" + "\n".join(cycles)


def test_the_walk_finds_a_cycle(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A package whose __init__ imports a submodule that imports back from the package is a
    cycle; imports in functions and under TYPE_CHECKING are not."""
    package = tmp_path / "circled"
    package.mkdir()
    (package / "__init__.py").write_text("from .a import A\n")
    (package / "a.py").write_text(
        "from typing import TYPE_CHECKING\n"
        "from .b import B\n"
        "A = 1\n"
        "if TYPE_CHECKING:\n    from .c import C\n"
        "def later():\n    from . import c\n"
    )
    (package / "b.py").write_text("from circled import A\nB = 2\n")
    (package / "c.py").write_text("from .a import A\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    paths = _modules("circled")
    known = set(paths)
    graph = {name: _imports(name, path, known) for name, path in paths.items()}
    assert graph["circled.a"] == {"circled.b"}
    assert _cycle_through(graph, "circled") == ["circled", "circled.a", "circled.b", "circled"]
    assert _cycle_through(graph, "circled.c") is None


def test_the_lint_bans_every_private_module() -> None:
    """Outside anarchon-core, ruff's banned-api (TID251) refuses `anarchon._*` imports, one entry
    per private module: a new private module must be added there, or backends could reach it."""
    import tomllib  # Python 3.11+: the suite runs on the machine's Python

    root = Path(__file__).resolve().parents[2]
    config = tomllib.loads((root / "pyproject.toml").read_text())
    lint = config["tool"]["ruff"]["lint"]
    banned = set(lint["flake8-tidy-imports"]["banned-api"])
    package = root / "anarchon-core" / "src" / "anarchon"
    private = {
        f"anarchon.{p.stem}"
        for p in package.iterdir()
        if p.name.startswith("_") and not p.name.startswith("__") and p.suffix in ("", ".py")
    }
    assert private, f"no private module found in {package}"
    assert private <= banned, f"not banned for other packages: {sorted(private - banned)}"
    assert "TID251" in lint["extend-select"], "the banned-api rule (TID251) is not selected"
    assert lint["per-file-ignores"].get("anarchon-core/**") == ["TID251"]
