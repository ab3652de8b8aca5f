"""The `anarchon` command line (filled in by the runtime issue)."""

from __future__ import annotations


def main() -> None:
    raise SystemExit("anarchon CLI: not built yet")
