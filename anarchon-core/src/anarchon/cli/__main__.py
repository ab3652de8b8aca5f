"""``python -m anarchon.cli``: the same as the ``anarchon`` command."""

from __future__ import annotations

from . import main

main()
