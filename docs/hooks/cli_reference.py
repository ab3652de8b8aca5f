"""mkdocs hook: the CLI reference is rendered from the CLI's own ``--help`` at every build.

``docs/reference/cli.md`` holds a marker where the help of ``anarchon`` and of each of its
commands is inserted, so the page cannot drift from the CLI: a new command, option or help text
appears on the next build. ``anarchon-core/tests/test_docs.py`` checks the built page.
"""

from __future__ import annotations

from typing import Any

MARKER = "<!-- anarchon-cli-help -->"
PAGE = "reference/cli.md"
WIDTH = 88


def _help(command: Any, name: str, parent: Any = None) -> str:
    import click

    settings = {"terminal_width": WIDTH, "max_content_width": WIDTH, **command.context_settings}
    context = click.Context(command, info_name=name, parent=parent, **settings)
    return command.get_help(context)


def render() -> str:
    """The reference section: the group's help, then each command's, in the CLI's order."""
    import click

    from anarchon.cli import cli

    settings = {"terminal_width": WIDTH, "max_content_width": WIDTH, **cli.context_settings}
    root = click.Context(cli, info_name="anarchon", **settings)
    parts = ["## `anarchon`", "", "```text", _help(cli, "anarchon"), "```", ""]
    for name in cli.list_commands(root):
        command = cli.get_command(root, name)
        if command is None or command.hidden:
            continue
        summary = command.get_short_help_str(limit=200)
        parts += [f"## `anarchon {name}`", "", summary, "", "```text"]
        parts += [_help(command, name, root), "```", ""]
    return "\n".join(parts)


def on_page_markdown(markdown: str, *, page: Any, config: Any, files: Any) -> str:
    if page.file.src_uri != PAGE:
        return markdown
    if MARKER not in markdown:
        raise ValueError(f"{PAGE} lost its marker {MARKER}; put it back where the help goes")
    return markdown.replace(MARKER, render())
