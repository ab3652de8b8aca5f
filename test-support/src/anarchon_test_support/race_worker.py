"""``python -m anarchon_test_support.race_worker SPEC``: one race worker (see `race`)."""

from __future__ import annotations

import asyncio
import json
import sys

from .race import race

if __name__ == "__main__":
    sys.stdout.write(json.dumps(asyncio.run(race(json.loads(sys.argv[1])))) + "\n")
