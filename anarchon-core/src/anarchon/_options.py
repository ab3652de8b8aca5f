"""Backend options: one cattrs converter turns URL query parameters, keyword arguments and TOML
into each backend's attrs options class, with errors that name the option and list the valid ones."""

from __future__ import annotations

from collections.abc import Mapping
from datetime import timedelta
from typing import Any, NewType, TypeVar

import attrs
import cattrs
from cattrs.errors import ClassValidationError, ForbiddenExtraKeysError

from ._durations import to_ms
from ._errors import ConfigError
from ._names import check_name

__all__ = ["DurationMs", "DurationMsOrZero", "StoreOptions", "converter", "structure_options"]

DurationMs = NewType("DurationMs", int)
"""An option holding milliseconds; accepts an int, a `timedelta` or a string such as ``"30s"``."""
DurationMsOrZero = NewType("DurationMsOrZero", int)
"""Like `DurationMs`, and 0 is allowed too (for options where 0 turns something off)."""

converter = cattrs.Converter(forbid_extra_keys=True)
"""The one converter for all options (backends register their own hooks on it if they need to)."""

_TRUE = {"1", "true", "yes", "on"}
_FALSE = {"0", "false", "no", "off"}


def _structure_bool(value: object, _: type) -> bool:
    if isinstance(value, bool):
        return value
    if isinstance(value, str) and value.lower() in _TRUE | _FALSE:
        return value.lower() in _TRUE
    raise ConfigError(f"expected true or false, got {value!r}")


def _structure_duration(value: object, _: type) -> DurationMs:
    return DurationMs(to_ms(value, what="duration"))


def _structure_duration_or_zero(value: object, _: type) -> DurationMsOrZero:
    return DurationMsOrZero(to_ms(value, what="duration", allow_zero=True))


def _structure_int(value: object, _: type) -> int:
    if isinstance(value, bool) or not isinstance(value, (int, str)):
        raise ConfigError(f"expected an integer, got {value!r}")
    try:
        return int(value)
    except ValueError:
        raise ConfigError(f"expected an integer, got {value!r}") from None


converter.register_structure_hook(bool, _structure_bool)
converter.register_structure_hook(int, _structure_int)
converter.register_structure_hook(DurationMs, _structure_duration)
converter.register_structure_hook(DurationMsOrZero, _structure_duration_or_zero)
converter.register_unstructure_hook(timedelta, lambda td: int(td / timedelta(milliseconds=1)))


def _check_prefix(_: object, attribute: attrs.Attribute[str], value: str) -> None:
    check_name(value, what="prefix")


def _check_history_limit(_: object, attribute: attrs.Attribute[int], value: int) -> None:
    if not 1 <= value <= 1_000_000:
        raise ConfigError(f"history_limit must be from 1 to 1000000, got {value}")


@attrs.frozen(kw_only=True)
class StoreOptions:
    """Options every backend accepts. Backends subclass this with their own fields."""

    prefix: str = attrs.field(default="cron", validator=_check_prefix)
    """Namespace of one deployment inside the store; same characters as job names."""
    history_limit: int = attrs.field(default=1000, validator=_check_history_limit)
    """Finished runs kept per job for `history` (L11)."""
    retention_margin_ms: DurationMs = attrs.field(default=DurationMs(60_000))
    """Extra time a run is kept beyond ``slot + max_late + attempts * lease`` (clock skew, L11)."""


OptionsT = TypeVar("OptionsT", bound=StoreOptions)


def valid_option_names(cls: type[StoreOptions]) -> list[str]:
    return sorted(a.name for a in attrs.fields(cls))


def _describe(exc: BaseException, cls: type[StoreOptions], where: str) -> list[str]:
    if isinstance(exc, ClassValidationError):
        return [line for sub in exc.exceptions for line in _describe(sub, cls, where)]
    if isinstance(exc, ForbiddenExtraKeysError):
        names = ", ".join(sorted(exc.extra_fields))
        return [
            f"unknown option {names} for {where}; valid options: "
            + ", ".join(valid_option_names(cls))
        ]
    field = next(
        (getattr(n, "name", None) for n in getattr(exc, "__notes__", []) if hasattr(n, "name")),
        None,
    )
    message = str(exc)
    if field and not message.startswith(field):
        message = f"option {field}: {message}"
    return [message]


def structure_options(cls: type[OptionsT], data: Mapping[str, Any], *, where: str) -> OptionsT:
    """Build `cls` from `data`, or raise one `ConfigError` naming every bad option."""
    try:
        return converter.structure(dict(data), cls)
    except ConfigError as exc:
        raise ConfigError(f"{where}: {exc}") from None
    except (ClassValidationError, ValueError, TypeError) as exc:
        problems = _describe(exc, cls, where)
        raise ConfigError(f"invalid options for {where}: " + "; ".join(problems)) from None
