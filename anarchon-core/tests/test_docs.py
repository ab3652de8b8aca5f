"""The docs site cannot drift from the code.

1. ``mkdocs build --strict`` succeeds (broken links, bad references and missing API objects fail it).
2. Every ```` ```python ```` block in ``docs/`` runs in a fresh folder; a block whose first line is
   ``# docs: no-run`` (it blocks forever, or needs a server) is only compiled. A block followed by a
   ```` ```text title="Output" ```` block must print exactly that.
3. Every plugin hook spec is documented with its signature (as datasette's docs test does).
4. The CLI reference shows the current ``--help`` of every command.
5. Every option of every installed backend is named on that backend's page.
"""

from __future__ import annotations

import html
import importlib.util
import inspect
import os
import re
import runpy
import subprocess
import sys
from pathlib import Path

import attrs
import click
import pytest
from click.testing import CliRunner

from anarchon.cli import cli
from anarchon.plugins import plugin_manager, spec

ROOT = Path(__file__).resolve().parents[2]
DOCS = ROOT / "docs"
NO_RUN = "# docs: no-run"
HOOK_PAGES = ("reference/plugins.md", "operations.md")
FENCE = re.compile(r"^(?P<indent> *)(?P<fence>```+)(?P<info>.*)$")


@attrs.frozen
class Block:
    page: str
    line: int
    language: str
    title: str | None
    code: str
    expected_output: str | None = None

    @property
    def id(self) -> str:
        return f"{self.page}:{self.line}"


def _blocks(path: Path) -> list[Block]:
    """Fenced blocks of one page, with indentation (admonitions, tabs) removed."""
    page = path.relative_to(DOCS).as_posix()
    found: list[Block] = []
    lines = path.read_text(encoding="utf-8").splitlines()
    i = 0
    while i < len(lines):
        match = FENCE.match(lines[i])
        if match is None:
            i += 1
            continue
        indent, fence, info = len(match["indent"]), match["fence"], match["info"].strip()
        body: list[str] = []
        j = i + 1
        while j < len(lines) and lines[j].strip() != fence:
            body.append(lines[j][indent:])
            j += 1
        language, _, rest = info.partition(" ")
        title = re.search(r'title="([^"]*)"', rest)
        found.append(
            Block(page, i + 1, language, title[1] if title else None, "\n".join(body) + "\n")
        )
        i = j + 1
    # Pair each python block with an Output block right after it.
    paired: list[Block] = []
    for index, block in enumerate(found):
        following = found[index + 1] if index + 1 < len(found) else None
        if (
            block.language == "python"
            and following is not None
            and following.language == "text"
            and following.title == "Output"
            and not "".join(
                lines[block.line + block.code.count("\n") + 1 : following.line - 1]
            ).strip()
        ):
            block = attrs.evolve(block, expected_output=following.code)
        paired.append(block)
    return paired


PAGES = sorted(DOCS.rglob("*.md"))
PYTHON = [b for page in PAGES for b in _blocks(page) if b.language == "python"]


def test_the_docs_have_examples() -> None:
    assert len(PYTHON) >= 10
    assert any(b.expected_output for b in PYTHON), "no example checks its output"


@pytest.mark.parametrize(
    "block",
    [
        # A block that runs starts a Python process; a no-run block is only compiled.
        pytest.param(b, id=b.id, marks=() if b.code.startswith(NO_RUN) else pytest.mark.processes)
        for b in PYTHON
    ],
)
def test_python_example_runs(block: Block, tmp_path: Path) -> None:
    code = block.code
    compile(code, block.id, "exec")
    if code.startswith(NO_RUN):
        assert block.expected_output is None, f"{block.id}: a no-run block cannot show output"
        return
    script = tmp_path / (block.title or "example.py")
    script.write_text(code, encoding="utf-8")
    env = {k: v for k, v in os.environ.items() if not k.startswith("ANARCHON_")}
    result = subprocess.run(
        [sys.executable, script.name],
        cwd=tmp_path,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert result.returncode == 0, f"{block.id} failed:\n{result.stderr}"
    if block.expected_output is not None:
        assert result.stdout.rstrip() == block.expected_output.rstrip(), (
            f"{block.id}: the output shown in the docs is stale; it now prints:\n{result.stdout}"
        )


# -- plugin hooks -----------------------------------------------------------------------------


def _hook_signatures() -> list[str]:
    return [
        f"{name}({', '.join(inspect.signature(func).parameters)})"
        for name, func in inspect.getmembers(spec, inspect.isfunction)
        if name.startswith("anarchon_")
    ]


@pytest.mark.parametrize("signature", _hook_signatures())
def test_plugin_hook_is_documented(signature: str) -> None:
    text = "\n".join((DOCS / page).read_text(encoding="utf-8") for page in HOOK_PAGES)
    assert signature in text, f"document the hook {signature} on one of {HOOK_PAGES}"


# -- the site ---------------------------------------------------------------------------------


def _mkdocs_missing() -> str | None:
    for module in ("mkdocs", "material", "mkdocstrings", "mkdocstrings_handlers.python"):
        if importlib.util.find_spec(module.split(".")[0]) is None:
            return f"{module} is not installed (uv sync --group docs)"
    return None


@pytest.fixture(scope="module")
def site(tmp_path_factory: pytest.TempPathFactory) -> Path:
    missing = _mkdocs_missing()
    if missing:
        pytest.skip(missing)
    out = tmp_path_factory.mktemp("site")
    result = subprocess.run(
        [sys.executable, "-m", "mkdocs", "build", "--strict", "-f", "mkdocs.yml", "-d", str(out)],
        cwd=ROOT,
        env={**os.environ, "NO_MKDOCS_2_WARNING": "1"},
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )
    assert result.returncode == 0, f"mkdocs build --strict failed:\n{result.stderr}"
    return out


@pytest.mark.processes
def test_the_site_builds_strictly(site: Path) -> None:
    assert (site / "index.html").is_file()
    assert (site / "reference" / "api" / "anarchon" / "index.html").is_file()


def _words(text: str) -> str:
    return " ".join(text.split())


@pytest.mark.processes
def test_the_cli_reference_is_current(site: Path) -> None:
    page = (site / "reference" / "cli" / "index.html").read_text(encoding="utf-8")
    shown = _words(html.unescape(re.sub(r"<[^>]+>", "", page)))
    width = runpy.run_path(str(DOCS / "hooks" / "cli_reference.py"))["WIDTH"]
    runner = CliRunner()
    for args in [[], *([name] for name in cli.list_commands(click.Context(cli)))]:
        result = runner.invoke(
            cli,
            [*args, "--help"],
            prog_name="anarchon",
            terminal_width=width,
            max_content_width=width,
        )
        assert result.exit_code == 0, result.output
        assert _words(result.output) in shown, f"`anarchon {' '.join(args)} --help` is not shown"


# -- backend options --------------------------------------------------------------------------

BACKEND_PAGES = {
    "memory": "backends/memory.md",
    "sqlite": "backends/sqlite.md",
    "postgresql": "backends/postgresql.md",
    "postgres": "backends/postgresql.md",
    "redis": "backends/redis.md",
    "rediss": "backends/redis.md",
    "amqp": "backends/rabbitmq.md",
    "amqps": "backends/rabbitmq.md",
    "nats": "backends/nats.md",
    "tls": "backends/nats.md",
}
"""URL scheme -> the page that documents it. Schemes not listed (example or third-party backends
such as ``mariadb``) are skipped."""
COMMON_OPTIONS = ("prefix", "history_limit", "retention_margin_ms")
INLINE_CODE = re.compile(r"`([^`\n]+)`")


def _backend_options() -> list[tuple[str, str, str]]:
    found = []
    for info in plugin_manager().backends():
        if info.scheme not in BACKEND_PAGES:
            continue
        names = [field.name for field in attrs.fields(info.load().Options)]
        found += [(info.scheme, BACKEND_PAGES[info.scheme], name) for name in names]
    return found


BACKEND_OPTIONS = _backend_options()


def test_every_installed_backend_is_checked() -> None:
    schemes = {scheme for scheme, _, _ in BACKEND_OPTIONS}
    assert "memory" in schemes, "the memory:// backend of the core package is always installed"
    for scheme in schemes:
        options = {option for s, _, option in BACKEND_OPTIONS if s == scheme}
        missing = set(COMMON_OPTIONS) - options
        assert not missing, f"{scheme}:// lacks the common options {sorted(missing)}"


@pytest.mark.parametrize(
    ("scheme", "page", "option"),
    BACKEND_OPTIONS,
    ids=[f"{scheme}-{option}" for scheme, _, option in BACKEND_OPTIONS],
)
def test_backend_option_is_documented(scheme: str, page: str, option: str) -> None:
    """Each option is named in inline code on its backend's page (`option`, `option=value`,
    `store.options.option`...), not just mentioned as a word in the prose."""
    path = DOCS / page
    assert path.is_file(), f"{scheme}:// has no page: write {page}"
    spans = INLINE_CODE.findall(path.read_text(encoding="utf-8"))
    word = re.compile(rf"(?<![A-Za-z0-9_]){re.escape(option)}(?![A-Za-z0-9_])")
    assert any(word.search(span) for span in spans), (
        f"option {option!r} of {scheme}:// is not documented on {page}: add it to the options table"
    )
