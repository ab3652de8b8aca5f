"""Celery beat on every node, each entry sent once per slot (``pip install 'anarchon[celery]'``).

Configure the Celery app::

    app.conf.beat_scheduler = "anarchon.integrations.celery:Scheduler"
    app.conf.anarchon_store = "redis://redis-host:6379/0"

and run ``celery -A proj beat`` on as many nodes as you like: for each entry and each slot of
its schedule, the nodes claim (entry, slot) through the store, and only the winner sends the
task. See the "Celery beat" page of the docs for the settings, what a slot is for each kind of
schedule, and what happens when a node or the store is down.
"""

from __future__ import annotations

from ._scheduler import SLOT_HEADER, Scheduler
from ._slots import job_name

__all__ = ["SLOT_HEADER", "Scheduler", "job_name"]
