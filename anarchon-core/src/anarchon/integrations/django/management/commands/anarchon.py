"""``python manage.py anarchon run|status|history``."""

from __future__ import annotations

import argparse
from typing import Any

from django.core.management.base import BaseCommand, CommandError, CommandParser

from ..._command import ACTIONS, CommandFailed, run_scheduler, show


class Command(BaseCommand):
    help = (
        "run: run the project's anarchon jobs until SIGINT/SIGTERM (each slot runs once across "
        "every process running this command). status [--once] [--job JOB]: the jobs' latest "
        "slots in the store. history JOB [--limit N]: the runs of JOB. "
        "`manage.py anarchon status --help` shows the options of status and history."
    )

    # `run` runs every system check first (as Django's commands do); `status` and `history`
    # only read the store, so a bad job declaration does not hide what the store holds.
    requires_system_checks: tuple[str, ...] = ()

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("action", choices=ACTIONS, help="run, status or history")
        parser.add_argument(
            "args",
            nargs=argparse.REMAINDER,
            metavar="...",
            help="status and history: the options of `anarchon status` and `anarchon history` "
            "(without the URL: the project's store is used)",
        )

    def handle(self, *args: str, **options: Any) -> None:
        action: str = options["action"]
        try:
            if action == "run":
                if args:
                    raise CommandFailed(
                        f"`anarchon run` takes no arguments, got {' '.join(args)!r}", 2
                    )
                self.check()
                run_scheduler(int(options["verbosity"]))
            else:
                show(action, args)
        except CommandFailed as exc:
            raise CommandError(str(exc), returncode=exc.exit_code) from None
