"""The `anarchon` command line: run a scheduler, watch a demo, inspect stores and schedules,
pause, resume and trigger jobs.

Errors are one line on stderr (``anarchon: error: ...``) with an exit code that says what kind
of error it was; ``--debug`` shows the traceback instead.
"""

from __future__ import annotations

import logging
import sys
from collections.abc import Sequence
from typing import Any, NoReturn

import attrs
import click

from .._errors import AnarchonError, ConfigError, StoreCorrupt, StoreNotSetUp, StoreUnavailable
from .._urls import redact

__all__ = [
    "EXIT_CONFIG",
    "EXIT_STORE_CORRUPT",
    "EXIT_STORE_NOT_SET_UP",
    "EXIT_STORE_UNAVAILABLE",
    "EXIT_UNEXPECTED",
    "CliError",
    "StoreCorruptExit",
    "StoreNotSetUpExit",
    "StoreUnavailableExit",
    "UnexpectedError",
    "cli",
    "main",
]

EXIT_UNEXPECTED = 1
EXIT_CONFIG = 2
EXIT_STORE_UNAVAILABLE = 3
EXIT_STORE_CORRUPT = 4
EXIT_STORE_NOT_SET_UP = 5

_EPILOG = """\b
Exit codes:
  0  success
  1  unexpected error (rerun with --debug for the traceback); certification failed;
     trigger --wait: the triggered run did not succeed, or was not decided in time
  2  bad usage or configuration: arguments, cron, time zone, URL, module path, settings
  3  the store could not be reached
  4  the store holds data anarchon cannot read
  5  the store holds no anarchon data where the command looked (history, status,
     dashboard: nothing was created; check the URL, its prefix and schema)
  130  interrupted (Ctrl-C)
"""

# Attributes every LogRecord has; anything else came from `extra=` and is printed as key=value.
_RECORD_FIELDS = frozenset(vars(logging.LogRecord("", 0, "", 0, "", None, None))) | {
    "message",
    "asctime",
    "taskName",
}


class CliError(click.ClickException):
    """A usage or configuration error, shown as one line ``anarchon: error: <message>``."""

    exit_code = EXIT_CONFIG

    def __init__(self, message: str) -> None:
        super().__init__(redact(message))

    def show(self, file: Any = None) -> None:
        click.echo(f"anarchon: error: {self.format_message()}", err=True)


class UnexpectedError(CliError):
    exit_code = EXIT_UNEXPECTED


class StoreUnavailableExit(CliError):
    exit_code = EXIT_STORE_UNAVAILABLE


class StoreCorruptExit(CliError):
    exit_code = EXIT_STORE_CORRUPT


class StoreNotSetUpExit(CliError):
    exit_code = EXIT_STORE_NOT_SET_UP


@attrs.define
class Options:
    """What the group's options tell the subcommands (``ctx.obj``)."""

    debug: bool = False
    log_level: str | None = None


class StructuredFormatter(logging.Formatter):
    """``time level logger: message key=value ...``: the `extra` fields are kept; credentials in
    URLs are redacted from the whole line."""

    def __init__(self) -> None:
        super().__init__("%(asctime)s %(levelname)s %(name)s: %(message)s")

    def format(self, record: logging.LogRecord) -> str:
        text = super().format(record)
        extras = {k: v for k, v in vars(record).items() if k not in _RECORD_FIELDS}
        if extras:
            text += " " + " ".join(f"{k}={v}" for k, v in sorted(extras.items()))
        return redact(text)


_LEVELS = ("DEBUG", "INFO", "WARNING", "ERROR")


def configure_logging(ctx: click.Context, default: str) -> None:
    """Log to stderr at ``--log-level`` (else DEBUG with ``--debug``, else `default`)."""
    options = ctx.find_object(Options) or Options()
    level = options.log_level or ("DEBUG" if options.debug else default)
    root = logging.getLogger()
    for handler in [h for h in root.handlers if getattr(h, "_anarchon_cli", False)]:
        root.removeHandler(handler)
    handler = logging.StreamHandler(sys.stderr)
    handler.setFormatter(StructuredFormatter())
    handler._anarchon_cli = True  # type: ignore[attr-defined]
    root.addHandler(handler)
    root.setLevel(level)


def _fail(ctx: click.Context, exc: BaseException) -> NoReturn:
    options = ctx.find_object(Options) or Options()
    if options.debug:
        raise exc
    message = redact(str(exc)) or type(exc).__name__
    if isinstance(exc, StoreNotSetUp):  # a ConfigError, with its own code for scripts
        raise StoreNotSetUpExit(message) from None
    if isinstance(exc, ConfigError):
        raise CliError(message) from None
    if isinstance(exc, StoreUnavailable):
        raise StoreUnavailableExit(message) from None
    if isinstance(exc, StoreCorrupt):
        raise StoreCorruptExit(message) from None
    if isinstance(exc, AnarchonError):
        raise UnexpectedError(message) from None
    raise UnexpectedError(
        f"unexpected {type(exc).__name__}: {message} (rerun with --debug for the traceback)"
    ) from None


class _Group(click.Group):
    """Turns exceptions from any command into one-line errors with documented exit codes."""

    def invoke(self, ctx: click.Context) -> Any:
        try:
            return super().invoke(ctx)
        except (click.ClickException, click.exceptions.Exit, click.Abort):
            raise
        except KeyboardInterrupt:
            click.echo("anarchon: interrupted", err=True)
            ctx.exit(130)
        except Exception as exc:  # noqa: BLE001 - every error becomes one line and an exit code
            _fail(ctx, exc)


def _version() -> str:
    from .. import __version__

    return __version__


@click.group(cls=_Group, epilog=_EPILOG, context_settings={"help_option_names": ["-h", "--help"]})
@click.version_option(_version(), "--version", prog_name="anarchon")
@click.option("--debug", is_flag=True, help="Show tracebacks and debug logs.")
@click.option(
    "--log-level",
    type=click.Choice(_LEVELS, case_sensitive=False),
    default=None,
    help="Log level (default: INFO for run, WARNING for the other commands).",
)
@click.pass_context
def cli(ctx: click.Context, debug: bool, log_level: str | None) -> None:
    """anarchon: cron jobs that run exactly once across many instances, with no leader.

    Every instance schedules every job; one atomic claim in a shared store picks the single
    winner of each (job, slot). Start with `anarchon demo`.
    """
    ctx.obj = Options(debug=debug, log_level=log_level.upper() if log_level else None)


def _register() -> None:
    from . import _certify, _control, _dashboard, _demo, _inspect, _next, _run, _status

    cli.add_command(_run.run)
    cli.add_command(_demo.demo)
    cli.add_command(_inspect.backends)
    cli.add_command(_inspect.history)
    cli.add_command(_status.status)
    cli.add_command(_control.pause)
    cli.add_command(_control.resume)
    cli.add_command(_control.trigger)
    cli.add_command(_next.next_slots)
    cli.add_command(_certify.certify)
    cli.add_command(_dashboard.dashboard)


_register()


def main(argv: Sequence[str] | None = None) -> None:
    """The console script: ``anarchon``."""
    cli.main(args=list(argv) if argv is not None else None, prog_name="anarchon")
