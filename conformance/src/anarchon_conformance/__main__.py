"""``python -m anarchon_conformance module:Harness [--url URL] [--out DIR]``."""

from __future__ import annotations

import sys

from .certify import main

if __name__ == "__main__":
    sys.exit(main())
