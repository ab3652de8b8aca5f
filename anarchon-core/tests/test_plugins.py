from __future__ import annotations

import logging
import subprocess
import sys
from collections.abc import Iterator
from importlib.metadata import EntryPoint

import pytest

import anarchon
from anarchon import ClaimRequest, ConfigError, Outcome, hookimpl
from anarchon.plugins import BackendRegistry, PluginManager, plugin_manager, reset_plugin_manager


@pytest.fixture(autouse=True)
def fresh_manager() -> Iterator[None]:
    reset_plugin_manager()
    yield
    reset_plugin_manager()


def test_memory_is_always_installed() -> None:
    schemes = [b.scheme for b in plugin_manager().backends()]
    assert "memory" in schemes


def test_sqlite_found_through_its_entry_point() -> None:
    info = plugin_manager().backend("sqlite")
    assert info.target == "anarchon_sqlite._store:SQLiteStore"
    assert info.plugin == "sqlite"


def test_unknown_scheme_lists_installed_ones() -> None:
    with pytest.raises(ConfigError) as info:
        anarchon.create_store("mongodb://localhost/x")
    message = str(info.value)
    assert "no backend for URL scheme 'mongodb'" in message
    assert "memory://" in message
    assert "sqlite://" in message
    # No invented package name: `anarchon-mongodb` is a name anyone could register.
    assert "pip install" not in message
    assert "third-party backend" in message


@pytest.mark.parametrize(
    ("scheme", "package"),
    [
        ("postgresql", "anarchon-postgres"),
        ("postgres", "anarchon-postgres"),
        ("amqp", "anarchon-rabbitmq"),
        ("amqps", "anarchon-rabbitmq"),
        ("redis", "anarchon-redis"),
        ("rediss", "anarchon-redis"),
        ("nats", "anarchon-nats"),
        ("sqlite", "anarchon-sqlite"),
    ],
)
def test_a_missing_backend_names_our_distribution(scheme: str, package: str) -> None:
    manager = PluginManager(load_entry_points=False)  # only memory://: every other scheme missing
    with pytest.raises(ConfigError) as info:
        manager.backend(scheme)
    assert f"`pip install {package}`" in str(info.value)


def test_the_install_hint_matches_the_installed_distributions() -> None:
    """Every scheme a published distribution of ours registers is hinted with that distribution,
    and the hint names no other: read from the installed entry points, so a new scheme or a
    renamed package cannot drift from `PACKAGE_OF_SCHEME`."""
    from importlib.metadata import distributions, entry_points

    from anarchon.plugins._manager import PACKAGE_OF_SCHEME

    served: dict[str, str] = {}
    for ep in entry_points(group="anarchon"):
        dist = ep.dist
        assert dist is not None
        if "Private :: Do Not Upload" in (dist.metadata.get_all("Classifier") or []):
            continue  # the MariaDB example: not published, so never a hint
        registry = BackendRegistry()
        registry.current_plugin = ep.name
        plugin = ep.load()
        if not hasattr(plugin, "anarchon_register_backends"):
            continue  # an observer (prometheus, otel)
        plugin.anarchon_register_backends(registry=registry)
        for info in registry.all():
            served[info.scheme] = dist.metadata["Name"]
    installed = {dist.metadata["Name"] for dist in distributions()}
    hinted = {s: p for s, p in PACKAGE_OF_SCHEME.items() if p in installed}
    assert served == hinted
    assert "anarchon-sqlite" in installed  # a dependency of anarchon: never absent


def test_disabled_plugins_are_not_loaded(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("ANARCHON_DISABLED_PLUGINS", "sqlite, other")
    manager = PluginManager()
    assert "sqlite" not in manager.plugin_names()
    with pytest.raises(ConfigError, match="disabled by ANARCHON_DISABLED_PLUGINS"):
        manager.backend("sqlite")


def test_a_plugin_that_fails_to_import_is_skipped_and_reported(
    monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    broken = EntryPoint(name="broken", value="no_such_module_xyz", group="anarchon")
    import anarchon.plugins._manager as manager_module

    real = manager_module.entry_points

    def fake_entry_points(*, group: str) -> list[EntryPoint]:
        return [*real(group=group), broken]

    monkeypatch.setattr(manager_module, "entry_points", fake_entry_points)
    manager = PluginManager()
    assert "broken" in manager.failed
    assert "sqlite" in manager.plugin_names()
    assert "plugin 'broken'" in caplog.text
    with pytest.raises(ConfigError, match="plugin 'broken' failed to load"):
        manager.backend("broken")


class ExtraBackend:
    @hookimpl
    def anarchon_register_backends(self, registry: BackendRegistry) -> None:
        registry.add("extra", "anarchon._backends.memory:MemoryStore", "memory again")


def test_registered_in_code_and_imported_lazily() -> None:
    manager = plugin_manager()
    manager.register(ExtraBackend(), name="extra")
    assert manager.backend("extra").load() is anarchon.MemoryStore


@pytest.mark.parametrize(
    ("scheme", "target", "message"),
    [
        ("Bad Scheme", "a:B", "invalid URL scheme"),
        ("ok", "not-a-target", "must look like 'package.module:ClassName'"),
        ("memory", "other.module:Store", "claimed by two plugins"),
    ],
)
def test_registry_refuses_bad_registrations(scheme: str, target: str, message: str) -> None:
    class Bad:
        @hookimpl
        def anarchon_register_backends(self, registry: BackendRegistry) -> None:
            registry.add(scheme, target)

    manager = plugin_manager()
    manager.register(Bad(), name="bad")
    with pytest.raises(ConfigError, match=message):
        manager.backends()


def test_target_that_is_not_a_store() -> None:
    class NotAStore:
        @hookimpl
        def anarchon_register_backends(self, registry: BackendRegistry) -> None:
            registry.add("odd", "anarchon._claims:Claim")

    plugin_manager().register(NotAStore(), name="odd")
    with pytest.raises(ConfigError, match="is not a ClaimStore subclass"):
        anarchon.create_store("odd://x")


def test_an_observer_that_raises_never_stops_the_others(caplog: pytest.LogCaptureFixture) -> None:
    seen: list[Outcome] = []

    class Raises:
        @hookimpl
        def anarchon_claim_decided(self) -> None:
            raise RuntimeError("observer bug")

    class Records:
        @hookimpl
        def anarchon_claim_decided(self, claim: anarchon.Claim) -> None:
            seen.append(claim.outcome)

    manager = plugin_manager()
    manager.register(Raises(), name="raises")
    manager.register(Records(), name="records")
    with caplog.at_level(logging.ERROR):
        manager.claim_decided(
            store="memory://",
            request=ClaimRequest(job="j", slot=0, instance="i"),
            claim=anarchon.Claim(outcome=Outcome.WON, attempt=1),
            latency_ms=0.1,
        )
    assert seen == [Outcome.WON]
    assert "plugin 'raises' raised in anarchon_claim_decided" in caplog.text


def test_every_hook_spec_has_a_docstring_and_the_prefix() -> None:
    from anarchon.plugins import spec

    hooks = [name for name in dir(spec) if name.startswith("anarchon_")]
    assert len(hooks) == 8
    for name in hooks:
        assert getattr(spec, name).__doc__, name


DRIVERS = ("redis", "psycopg", "psycopg_pool", "aiormq", "nats", "aiomysql", "pymysql")


@pytest.mark.processes
def test_registering_every_installed_backend_imports_no_driver() -> None:
    """Loading the plugins imports each backend package's ``__init__`` (`lazy_exports`), never
    its driver: a process that uses SQLite does not pay for the Redis client it has installed."""
    code = (
        "import sys\n"
        "from anarchon.plugins import plugin_manager\n"
        "schemes = [b.scheme for b in plugin_manager().backends()]\n"
        f"print(sorted(schemes), [m for m in {DRIVERS!r} if m in sys.modules])\n"
    )
    out = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, check=True, timeout=60
    ).stdout
    schemes, imported = out.rsplit("] [", 1)
    assert "redis" in schemes and "postgresql" in schemes and "amqp" in schemes, out
    assert imported.strip() == "]", f"drivers imported by registering the backends: {out}"


def test_a_lazy_name_is_imported_on_first_use_and_kept() -> None:
    import anarchon_redis

    store_class = anarchon_redis.RedisStore
    from anarchon_redis._store import RedisStore

    assert store_class is RedisStore
    assert anarchon_redis.__dict__["RedisStore"] is RedisStore, "found directly from now on"
    with pytest.raises(AttributeError, match="module 'anarchon_redis' has no attribute 'Nope'"):
        anarchon_redis.Nope  # noqa: B018
