"""What ``manage.py anarchon run|status|history`` does, apart from Django's argument parsing.

``status`` and ``history`` are the ``anarchon`` CLI's own commands, given the project's store:
the same options, the same output, the same exit codes.
"""

from __future__ import annotations

import logging
import sys
from collections.abc import Sequence
from typing import Any

import click

from ..._errors import AnarchonError, ConfigError, StoreCorrupt, StoreNotSetUp, StoreUnavailable
from ..._urls import redact
from ...abc import ClaimStore, SupportsJobList
from ...cli import (
    EXIT_CONFIG,
    EXIT_STORE_CORRUPT,
    EXIT_STORE_NOT_SET_UP,
    EXIT_STORE_UNAVAILABLE,
    EXIT_UNEXPECTED,
    StructuredFormatter,
    cli,
)
from ._jobs import JOBS_MODULE
from ._project import scheduler
from ._settings import read_project_settings, store_for_commands

__all__ = ["ACTIONS", "CommandFailed", "run_scheduler", "show"]

ACTIONS = ("run", "status", "history")

_LEVELS = {0: logging.WARNING, 1: logging.INFO}


class CommandFailed(Exception):
    """A failure to report in one line, with the ``anarchon`` CLI's exit code."""

    def __init__(self, message: str, exit_code: int) -> None:
        super().__init__(redact(message))
        self.exit_code = exit_code


def _exit_code(exc: AnarchonError) -> int:
    if isinstance(exc, StoreNotSetUp):
        return EXIT_STORE_NOT_SET_UP
    if isinstance(exc, ConfigError):
        return EXIT_CONFIG
    if isinstance(exc, StoreUnavailable):
        return EXIT_STORE_UNAVAILABLE
    if isinstance(exc, StoreCorrupt):
        return EXIT_STORE_CORRUPT
    return EXIT_UNEXPECTED


def log_to_stderr(verbosity: int) -> None:
    """Show anarchon's logs on stderr, unless the project's ``LOGGING`` already routes them:
    ``-v 0`` warnings, ``-v 1`` (the default) info, ``-v 2`` and more debug."""
    logger = logging.getLogger("anarchon")
    if logger.handlers or logging.getLogger().handlers:
        return
    handler = logging.StreamHandler(sys.stderr)
    handler.setFormatter(StructuredFormatter())
    logger.addHandler(handler)
    logger.setLevel(_LEVELS.get(verbosity, logging.DEBUG))


def run_scheduler(verbosity: int) -> None:
    """``manage.py anarchon run``: the project's scheduler until SIGINT or SIGTERM, which hand
    the running jobs over as `anarchon.Scheduler.run` does."""
    log_to_stderr(verbosity)
    try:
        project = scheduler.get()
    except ConfigError as exc:
        raise CommandFailed(str(exc), EXIT_CONFIG) from None
    if not project.jobs:
        raise CommandFailed(
            f"no jobs are declared: declare them with @scheduler.job(...) in an {JOBS_MODULE}.py "
            "module of an installed app (from anarchon.integrations.django import scheduler)",
            EXIT_CONFIG,
        )
    try:
        project.run()
    except AnarchonError as exc:
        raise CommandFailed(str(exc), _exit_code(exc)) from None


def _without_url(command: click.Command, url: str) -> click.Command:
    """`command` with its URL argument given: the rest of its interface as it is."""
    callback = command.callback
    assert callback is not None

    def given_url(**kwargs: Any) -> Any:
        return callback(url=url, **kwargs)

    return click.Command(
        command.name,
        params=[param for param in command.params if param.name != "url"],
        callback=given_url,
        help=(command.help or "").replace("in the store at URL", "in the project's store"),
        context_settings={"help_option_names": ["-h", "--help"]},
    )


def _naming_jobs(args: Sequence[str], store: ClaimStore | None) -> list[str]:
    """``status`` on a store that cannot list its jobs shows the declared ones."""
    declared = [d.spec.name for d in scheduler.declared if d.spec is not None]
    if any(arg == "--job" or arg.startswith("--job=") for arg in args) or not declared:
        return list(args)
    if store is None or isinstance(store, SupportsJobList):
        return list(args)
    return [*args, *(f"--job={name}" for name in declared)]


def show(action: str, args: Sequence[str]) -> None:
    """``manage.py anarchon status|history ...``: the CLI's command on the project's store."""
    project = read_project_settings()
    if project.problems or project.settings is None:
        problem = project.problems[0]
        raise CommandFailed(f"{problem.message} ({problem.id}: {problem.hint})", EXIT_CONFIG)
    url = store_for_commands(project.settings)
    if action == "status":
        args = _naming_jobs(args, project.store)
    command = _without_url(cli.commands[action], url)
    try:
        command.main(
            args=list(args), prog_name=f"manage.py anarchon {action}", standalone_mode=False
        )
    except click.ClickException as exc:
        raise CommandFailed(exc.format_message(), exc.exit_code) from None
    except click.Abort:
        raise CommandFailed("interrupted", 130) from None
    except AnarchonError as exc:
        raise CommandFailed(str(exc), _exit_code(exc)) from None
