"""``settings.ANARCHON``: the project's scheduler settings, read when first needed (never when a
module is imported, so importing the app needs no configured settings).

The keys are the `anarchon.Scheduler` settings; each problem found is a `Problem` with the id
and hint the system checks report (`_checks`), and the first one is the `ConfigError` that
building the scheduler raises. Messages never hold a credential: URLs are shown redacted.
"""

from __future__ import annotations

import difflib
import os
from collections.abc import Mapping
from typing import Any

import attrs

from ..._connect import create_store
from ..._errors import ConfigError
from ..._runtime.settings import ENV_PREFIX, Settings, load_settings
from ..._urls import StoreURL, redact
from ...abc import ClaimStore

__all__ = [
    "KEYS",
    "SETTING",
    "Problem",
    "ProjectSettings",
    "read_project_settings",
    "store_for_commands",
]

SETTING = "ANARCHON"
"""The name of the Django setting."""

KEYS = (
    "store",
    "instance",
    "prefix",
    "grace",
    "clock_skew",
    "start_timeout",
    "claim_timeout",
    "health_port",
    "catch_up",
    "fail_fast",
)
"""The keys `settings.ANARCHON` may hold: the `anarchon.Scheduler` settings of the same names."""

EXAMPLE = 'ANARCHON = {"store": "postgresql://app@db.internal:5432/app"}'

_VALUES_HINT = (
    "store: a store URL; instance: printable text; prefix: letters, digits, '_' and '-'; "
    "grace, clock_skew, start_timeout, claim_timeout: durations such as '30s', '500ms', '2m' "
    "(an int is milliseconds); health_port: 0-65535; catch_up: 'latest', 'all' or 'none'; "
    "fail_fast: True or False"
)
_STORE_HINT = (
    "Write a URL such as postgresql://user@host:5432/dbname, redis://host:6379/0 or "
    "sqlite:////var/lib/app/anarchon.db; `anarchon backends` lists the installed schemes, and "
    "store options go in the URL's query (?name=value)"
)


@attrs.frozen(kw_only=True)
class Problem:
    """What is wrong with the settings, as a system check reports it."""

    id: str
    """``anarchon.E001`` ...: the check's id (listed in docs/integrations/django.md)."""
    message: str
    hint: str


@attrs.frozen(kw_only=True)
class ProjectSettings:
    """`settings.ANARCHON` read and checked."""

    scheduler_kwargs: dict[str, Any]
    """The keyword arguments of `anarchon.Scheduler` (None values left out)."""
    settings: Settings | None
    """The settings merged as the Scheduler merges them (code, ``ANARCHON_*`` environment,
    files); None when they cannot be."""
    store: ClaimStore | None
    """The store built (never opened) from the settings; None when it cannot be."""
    problems: tuple[Problem, ...]


_MISSING = object()


def configured_value() -> object:
    """The value of ``settings.ANARCHON`` (a sentinel when the setting is absent)."""
    from django.conf import settings

    return getattr(settings, SETTING, _MISSING)


def _in_settings(message: str) -> str:
    # `load_settings` names the source of settings given in code "code"; here that is this setting.
    return redact(message.replace("(from code)", f"(in settings.{SETTING})"))


def read_project_settings(
    value: object = _MISSING, *, environ: Mapping[str, str] | None = None
) -> ProjectSettings:
    """Read `value` (by default ``settings.ANARCHON``) as the project's scheduler settings,
    collecting every problem rather than stopping at the first."""
    if value is _MISSING:
        value = configured_value()
    env = os.environ if environ is None else environ
    if value is _MISSING:
        return _failed(
            Problem(
                id="anarchon.E001",
                message=f"settings.{SETTING} is not set: anarchon does not know its store",
                hint=f"Add {EXAMPLE} to your settings (any store URL every process can reach)",
            )
        )
    if not isinstance(value, Mapping):
        return _failed(
            Problem(
                id="anarchon.E001",
                message=f"settings.{SETTING} must be a dict, got {type(value).__name__}",
                hint=f"Write it like {EXAMPLE}",
            )
        )
    problems: list[Problem] = []
    unknown = sorted(repr(key) for key in value if key not in KEYS)
    if unknown:
        guesses = [
            difflib.get_close_matches(str(key), KEYS, n=1)
            for key in value
            if key not in KEYS and isinstance(key, str)
        ]
        meant = sorted({guess[0] for guess in guesses if guess})
        problems.append(
            Problem(
                id="anarchon.E004",
                message=f"settings.{SETTING} has unknown key(s): {', '.join(unknown)}",
                hint=(f"Did you mean {', '.join(map(repr, meant))}? " if meant else "")
                + f"Valid keys: {', '.join(KEYS)}",
            )
        )
    known = {key: item for key, item in value.items() if key in KEYS and item is not None}
    store_problem = _check_store(known.get("store"), env)
    if store_problem is not None:
        problems.append(store_problem)
        known.pop("store", None)
    try:
        merged: Settings | None = load_settings(known, environ=env)
    except ConfigError as exc:
        merged = None
        problems.append(
            Problem(id="anarchon.E005", message=_in_settings(str(exc)), hint=_VALUES_HINT)
        )
    if merged is not None and store_problem is None and merged.prefix is not None:
        in_url = _url_prefix(merged.store)
        if in_url is not None and in_url != merged.prefix:
            problems.append(
                Problem(
                    id="anarchon.E005",
                    message=(
                        f"the prefix is set twice, differently: {in_url!r} in the store URL and "
                        f"{merged.prefix!r} as settings.{SETTING}['prefix']"
                    ),
                    hint="Set it once, in the URL (?prefix=...) or as the 'prefix' key",
                )
            )
    store = None
    url = merged.store if merged is not None else known.get("store")
    if store_problem is None and url is not None:
        # With the other settings bad, the URL is still checked, without the prefix.
        prefix = merged.prefix if merged is not None else None
        try:
            store = create_store(url, **({"prefix": prefix} if prefix else {}))
        except ConfigError as exc:
            problems.append(
                Problem(id="anarchon.E003", message=_in_settings(str(exc)), hint=_STORE_HINT)
            )
        if merged is None:
            store = None
    return ProjectSettings(
        scheduler_kwargs=known,
        settings=merged,
        store=store,
        problems=tuple(sorted(problems, key=lambda problem: problem.id)),
    )


def _check_store(store: object, env: Mapping[str, str]) -> Problem | None:
    if store is None:
        if f"{ENV_PREFIX}STORE" in env:
            return None
        return Problem(
            id="anarchon.E002",
            message=f"settings.{SETTING} sets no 'store'",
            hint=(
                f"Set {SETTING}['store'] (or the environment variable {ENV_PREFIX}STORE) to a "
                "store every process of the project reaches, such as "
                "'postgresql://app@db.internal:5432/app'; a SQLite file serves only processes "
                "on one host"
            ),
        )
    if not isinstance(store, str) or not store:
        return Problem(
            id="anarchon.E003",
            message=f"settings.{SETTING}['store'] must be a URL string, got {type(store).__name__}",
            hint=_STORE_HINT,
        )
    try:
        StoreURL.parse(store)
    except ConfigError as exc:
        return Problem(id="anarchon.E003", message=redact(str(exc)), hint=_STORE_HINT)
    return None


def _url_prefix(store: str) -> str | None:
    try:
        return StoreURL.parse(store).options().get("prefix")
    except ConfigError:
        return None  # reported by the store's own check


def _failed(problem: Problem) -> ProjectSettings:
    return ProjectSettings(scheduler_kwargs={}, settings=None, store=None, problems=(problem,))


def store_for_commands(settings: Settings) -> str:
    """The store URL the ``anarchon`` commands (``status``, ``history``) are given: the
    settings' URL, with the settings' prefix in its query when it has none (the commands read
    the store options from the URL). It holds the credentials: never print it."""
    url = StoreURL.parse(settings.store)
    if settings.prefix is None or "prefix" in url.options():
        return url.secret()
    before, hash_, fragment = url.secret().partition("#")
    joiner = "&" if "?" in before else "?"
    return f"{before}{joiner}prefix={settings.prefix}{hash_}{fragment}"
