from __future__ import annotations

from pathlib import Path

import pytest

from anarchon import ConfigError, MemoryStore, Scheduler
from anarchon._runtime.settings import DEFAULT_STORE, load_settings


def test_defaults(tmp_path: Path) -> None:
    settings = load_settings(environ={}, cwd=tmp_path)
    assert settings.store == DEFAULT_STORE == "sqlite:///anarchon.db"
    assert (settings.grace_ms, settings.clock_skew_ms) == (30_000, 1_000)


def test_pyproject_section(tmp_path: Path) -> None:
    (tmp_path / "pyproject.toml").write_text(
        '[project]\nname = "app"\n[tool.anarchon]\nstore = "memory://x"\ngrace = "5s"\n'
    )
    settings = load_settings(environ={}, cwd=tmp_path)
    assert (settings.store, settings.grace_ms) == ("memory://x", 5000)


def test_anarchon_toml_found_from_a_subfolder(tmp_path: Path) -> None:
    (tmp_path / "anarchon.toml").write_text('prefix = "billing"\n')
    sub = tmp_path / "a" / "b"
    sub.mkdir(parents=True)
    assert load_settings(environ={}, cwd=sub).prefix == "billing"


def test_environment_beats_files_and_code_beats_environment(tmp_path: Path) -> None:
    (tmp_path / "anarchon.toml").write_text('store = "memory://file"\ninstance = "from-file"\n')
    env = {"ANARCHON_STORE": "memory://env", "ANARCHON_CLOCK_SKEW": "250ms"}
    settings = load_settings({"instance": "from-code"}, environ=env, cwd=tmp_path)
    assert (settings.store, settings.instance, settings.clock_skew_ms) == (
        "memory://env",
        "from-code",
        250,
    )


@pytest.mark.parametrize(
    ("toml", "env", "message"),
    [
        ("stroe = 'x'\n", {}, "unknown setting 'stroe' in "),
        ("grace = 'soon'\n", {}, "grace (from "),
        ("prefix = 'a b'\n", {}, "prefix (from "),
        ("", {"ANARCHON_GRACE": "-1s"}, "environment variable ANARCHON_GRACE"),
        ("store = [1]\n", {}, "store (from "),
        ("store = \n", {}, "cannot read"),
    ],
)
def test_bad_settings_name_their_source(
    tmp_path: Path, toml: str, env: dict[str, str], message: str
) -> None:
    (tmp_path / "anarchon.toml").write_text(toml)
    with pytest.raises(ConfigError) as info:
        load_settings(environ=env, cwd=tmp_path)
    assert message in str(info.value)


def test_scheduler_reads_the_environment() -> None:
    s = Scheduler(environ={"ANARCHON_STORE": "memory://from-env", "ANARCHON_PREFIX": "p"})
    assert isinstance(s.store, MemoryStore)
    assert s.store.options.prefix == "p"
    assert s.store_name == "memory://from-env"


def test_scheduler_prefix_conflicting_with_its_store() -> None:
    with pytest.raises(ConfigError, match="set it once"):
        Scheduler(MemoryStore.create(prefix="a"), prefix="b", environ={})
