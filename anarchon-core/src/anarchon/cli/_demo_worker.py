"""One instance of ``anarchon demo``, started by it as
``python -m anarchon.cli._demo_worker URL INSTANCE JOURNAL``; stops on SIGTERM/SIGINT, or when
the demo that started it is gone."""

from __future__ import annotations

import asyncio
import logging
import os
import signal
import sys
from collections.abc import Sequence

from .._runtime.scheduler import Scheduler
from ._demo_job import make_scheduler

__all__ = ["main"]


async def _serve(scheduler: Scheduler) -> None:
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGINT, signal.SIGTERM):
        loop.add_signal_handler(sig, scheduler.request_stop)
    parent = os.getppid()
    serving = asyncio.create_task(scheduler.serve())
    # If the demo dies without stopping us, stop too rather than run on forever.
    while not serving.done():
        await asyncio.wait([serving], timeout=0.5)
        if os.getppid() != parent:
            scheduler.request_stop()
    await serving


def main(argv: Sequence[str] | None = None) -> int:
    url, instance, journal = argv if argv is not None else sys.argv[1:]
    logging.basicConfig(
        level=logging.INFO,
        format=f"%(asctime)s {instance} %(levelname)s %(name)s: %(message)s",
    )
    asyncio.run(_serve(make_scheduler(url, instance, journal)))
    return 0


if __name__ == "__main__":
    sys.exit(main())
