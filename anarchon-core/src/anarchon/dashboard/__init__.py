"""``anarchon dashboard``: a read-only web page over a store (``anarchon[dashboard]``).

Jobs with their next slots in their zones, a timeline of recent slots coloured by outcome, the
instances seen in recent runs and the last errors, refreshing by itself. Server-rendered with
Jinja2 over Starlette, served by uvicorn; no JavaScript build and nothing fetched from the
network. Start it with ``anarchon dashboard URL``, or mount `create_app` in your own ASGI app.

Importing this module needs the extra: ``pip install 'anarchon[dashboard]'``.
"""

from __future__ import annotations

from ._app import DEFAULT_SLOTS, DashboardSettings, control_routes, create_app

__all__ = ["DEFAULT_SLOTS", "DashboardSettings", "control_routes", "create_app"]
