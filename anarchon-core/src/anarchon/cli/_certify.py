"""``anarchon certify module:Harness``: run the conformance kit (anarchon-conformance)."""

from __future__ import annotations

from pathlib import Path

import click

from . import CliError, configure_logging

__all__ = ["certify"]


@click.command()
@click.argument("harness", metavar="MODULE:HARNESS")
@click.option("--url", default=None, help="Store URL handed to the harness.")
@click.option(
    "--out",
    type=click.Path(file_okay=False, path_type=Path),
    default=None,
    help="Directory to write the certificate into (Markdown and JSON).",
)
@click.pass_context
def certify(ctx: click.Context, harness: str, url: str | None, out: Path | None) -> None:
    """Certify a backend: run the conformance kit against the BackendHarness at MODULE:HARNESS
    and print its certificate. Exit code 0 only when every required rule passed."""
    configure_logging(ctx, "WARNING")
    try:
        from anarchon_conformance.certify import run_certification
    except ImportError:
        raise CliError(
            "certify needs the conformance kit: install anarchon-conformance "
            "(pip install anarchon-conformance)",
        ) from None
    ctx.exit(run_certification(harness, url, out))
