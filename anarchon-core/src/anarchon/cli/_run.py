"""``anarchon run module:attr``: import an application's scheduler and run it until SIGTERM."""

from __future__ import annotations

import importlib
import os
import sys

import click

from .._runtime.scheduler import Scheduler
from . import CliError, Options, configure_logging

__all__ = ["load_scheduler", "run"]

DEFAULT_ATTRIBUTE = "scheduler"


def load_scheduler(target: str) -> Scheduler:
    """Import ``module:attr`` (``attr`` may be dotted, and defaults to ``scheduler``) from the
    current directory or sys.path; the attribute is a `Scheduler` or a zero-argument callable
    returning one. Anything else is a `CliError` (exit code 2)."""
    module_name, _, attribute = target.partition(":")
    attribute = attribute or DEFAULT_ATTRIBUTE
    if not module_name or not all(p.isidentifier() for p in module_name.split(".")):
        raise CliError(
            f"{target!r} is not a module path: write module:attribute, for example myapp.jobs:scheduler"
        )
    if not all(p.isidentifier() for p in attribute.split(".")):
        raise CliError(f"{target!r}: {attribute!r} is not an attribute name")
    cwd = os.getcwd()
    if cwd not in sys.path:
        sys.path.insert(0, cwd)
    try:
        module = importlib.import_module(module_name)
    except ModuleNotFoundError as exc:
        if exc.name is not None and module_name.startswith(exc.name):
            raise CliError(
                f"cannot import module {module_name!r} (from {target!r}): no module named "
                f"{exc.name!r} in {cwd} or on sys.path"
            ) from None
        raise CliError(f"module {module_name!r} failed to import: {exc}") from None
    value: object = module
    for part in attribute.split("."):
        try:
            value = getattr(value, part)
        except AttributeError:
            raise CliError(
                f"module {module_name!r} has no attribute {attribute!r}; "
                f"point at your Scheduler, for example {module_name}:scheduler"
            ) from None
    if isinstance(value, Scheduler):
        return value
    if callable(value) and not isinstance(value, type):
        try:
            made = value()
        except TypeError as exc:
            if "argument" not in str(exc):
                raise
            raise CliError(
                f"{target!r} is a callable that needs arguments ({exc}); "
                "point at a Scheduler or a function without parameters that returns one"
            ) from None
        if isinstance(made, Scheduler):
            return made
        raise CliError(f"{target!r} returned a {type(made).__name__}, not an anarchon.Scheduler")
    raise CliError(
        f"{target!r} is a {type(value).__name__}, not an anarchon.Scheduler "
        "(or a function returning one)"
    )


@click.command()
@click.argument("target", metavar="MODULE:ATTR")
@click.option("--debug", is_flag=True, help="Show tracebacks and debug logs.")
@click.pass_context
def run(ctx: click.Context, target: str, debug: bool) -> None:
    """Run the Scheduler at MODULE:ATTR until SIGINT or SIGTERM.

    MODULE is imported with the current directory on sys.path; ATTR (default `scheduler`) is a
    Scheduler or a function without parameters that returns one. On SIGINT/SIGTERM the scheduler
    stops claiming, lets running jobs finish within its grace period, then releases their
    leases so other instances take over at once.
    """
    options = ctx.find_object(Options)
    if options is not None and debug:
        options.debug = True
    configure_logging(ctx, "INFO")
    scheduler = load_scheduler(target)
    if not scheduler.jobs:
        raise CliError(f"{target!r} has no jobs; add some with @scheduler.job(...)")
    scheduler.run()
