"""The dashboard's web app (Starlette): one page, the fragment it refreshes itself with, its CSS.

Read-only: every route is a GET that reads the store. Controls (pause, resume, trigger) are a
later feature; they will be POST routes added through `control_routes`, behind an explicit
``--allow-control`` and a token, and nothing else here changes for them.
"""

from __future__ import annotations

import asyncio
from collections.abc import Mapping, Sequence
from importlib import resources

import attrs
import jinja2
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import HTMLResponse, Response
from starlette.routing import BaseRoute, Route

from .. import __version__
from .._errors import AnarchonError
from .._runtime.interval import JobSchedule
from .._urls import StoreURL, redact
from ..abc import ClaimStore
from ._view import LEGEND, DashboardView, read_view

__all__ = ["DashboardSettings", "control_routes", "create_app"]

DEFAULT_SLOTS = 30


@attrs.frozen(kw_only=True)
class DashboardSettings:
    """What the dashboard shows and how often the page refreshes."""

    url: StoreURL
    """The store, shown on the page with its credentials hidden."""
    jobs: tuple[str, ...] = ()
    """Show only these jobs (``--job``); empty: the app's jobs and every job the store lists."""
    schedules: Mapping[str, JobSchedule] = attrs.field(factory=dict)
    """The jobs' crons (from ``--app``), for their next slots; a job without one shows
    "schedule unknown"."""
    refresh_ms: int = 5_000
    slots: int = DEFAULT_SLOTS
    """How many recent slots each job's timeline shows."""


def control_routes(settings: DashboardSettings) -> list[BaseRoute]:
    """The routes that change the store: none yet.

    The seam for pause, resume and trigger: they will be returned here only when the dashboard
    runs with ``--allow-control`` and a token, and each will check the token. Everything else in
    the dashboard is read-only, and stays so."""
    return []


def _environment() -> jinja2.Environment:
    return jinja2.Environment(
        loader=jinja2.PackageLoader("anarchon.dashboard", "templates"),
        autoescape=True,
        undefined=jinja2.StrictUndefined,
        trim_blocks=True,
        lstrip_blocks=True,
    )


def create_app(store: ClaimStore, settings: DashboardSettings) -> Starlette:
    """The dashboard over an open `store` (the caller opens and closes it).

    ``GET /`` is the page, ``GET /content`` the part of it that the page's script fetches every
    `refresh_ms` (without JavaScript the page reloads itself instead), ``GET /dashboard.css``
    its style. A store that cannot be read shows its error on the page (status 503) and the page
    keeps refreshing, so it recovers by itself when the store does."""
    environment = _environment()
    page = environment.get_template("page.html")
    content = environment.get_template("content.html")
    css = resources.files("anarchon.dashboard").joinpath("static/dashboard.css").read_bytes()
    reading = asyncio.Lock()  # one read at a time, however many tabs are open

    async def render(template: jinja2.Template) -> Response:
        view: DashboardView | None = None
        problem = None
        async with reading:
            try:
                view = await read_view(
                    store,
                    settings.url,
                    jobs=settings.jobs,
                    schedules=settings.schedules,
                    slots=settings.slots,
                )
            except AnarchonError as exc:
                problem = f"{type(exc).__name__}: {redact(str(exc))}"
        html = template.render(
            view=view,
            problem=problem,
            store=str(settings.url),
            legend=LEGEND,
            refresh_ms=settings.refresh_ms,
            refresh_s=f"{settings.refresh_ms / 1000:g}",
            version=__version__,
        )
        headers = {"Cache-Control": "no-store"}
        return HTMLResponse(html, status_code=503 if problem else 200, headers=headers)

    async def show_page(request: Request) -> Response:
        return await render(page)

    async def show_content(request: Request) -> Response:
        return await render(content)

    async def show_css(request: Request) -> Response:
        return Response(css, media_type="text/css", headers={"Cache-Control": "no-cache"})

    routes: Sequence[BaseRoute] = [
        Route("/", show_page, methods=["GET"]),
        Route("/content", show_content, methods=["GET"]),
        Route("/dashboard.css", show_css, methods=["GET"]),
        *control_routes(settings),
    ]
    return Starlette(routes=list(routes))
