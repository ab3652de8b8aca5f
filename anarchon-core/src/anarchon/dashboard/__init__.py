"""``anarchon dashboard``: a web page over a store (``anarchon[dashboard]``).

Jobs with their next slots in their zones and their pauses, a timeline of recent slots coloured
by outcome, the instances seen in recent runs and the last errors, refreshing by itself.
Read-only, unless given a `DashboardControl` (``--allow-control``): then pause, resume and
trigger buttons, behind a token. Server-rendered with
Jinja2 over Starlette, served by uvicorn; no JavaScript build and nothing fetched from the
network. Start it with ``anarchon dashboard URL``, or mount `create_app` in your own ASGI app.

Importing this module needs the extra: ``pip install 'anarchon[dashboard]'``.
"""

from __future__ import annotations

from ._app import DEFAULT_SLOTS, DashboardSettings, create_app
from ._control import DashboardControl, control_routes

__all__ = ["DEFAULT_SLOTS", "DashboardControl", "DashboardSettings", "control_routes", "create_app"]
