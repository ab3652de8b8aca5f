"""The dashboard's web app (Starlette): one page, the fragment it refreshes itself with, its CSS.

Read-only: every route here is a GET that reads the store. The controls (pause, resume,
trigger) are POST routes added by `control_routes` (``_control.py``) only when the app is given a
`DashboardControl` (``--allow-control``); the page then shows their forms to a browser signed in
with the token.
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
from ._control import (
    FLASH_COOKIE,
    UNTIL_CHOICES,
    DashboardControl,
    control_routes,
    take_flash,
)
from ._view import LEGEND, DashboardView, read_view

__all__ = ["DashboardControl", "DashboardSettings", "control_routes", "create_app"]

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


def _environment() -> jinja2.Environment:
    return jinja2.Environment(
        loader=jinja2.PackageLoader("anarchon.dashboard", "templates"),
        autoescape=True,
        undefined=jinja2.StrictUndefined,
        trim_blocks=True,
        lstrip_blocks=True,
    )


def create_app(
    store: ClaimStore, settings: DashboardSettings, control: DashboardControl | None = None
) -> Starlette:
    """The dashboard over an open `store` (the caller opens and closes it), with the controls of
    `control` if given (its store opened for writing; see `control_routes`).

    ``GET /`` is the page, ``GET /content`` the part of it that the page's script fetches every
    `refresh_ms` (without JavaScript the page reloads itself instead), ``GET /dashboard.css``
    its style. A store that cannot be read shows its error on the page (status 503) and the page
    keeps refreshing, so it recovers by itself when the store does."""
    environment = _environment()
    page = environment.get_template("page.html")
    content = environment.get_template("content.html")
    css = resources.files("anarchon.dashboard").joinpath("static/dashboard.css").read_bytes()
    reading = asyncio.Lock()  # one read at a time, however many tabs are open

    async def render(template: jinja2.Template, request: Request, flash: str = "") -> Response:
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
            control_on=control is not None,
            controls=control if control is not None and control.signed_in(request) else None,
            until_choices=UNTIL_CHOICES,
            flash=flash,
        )
        headers = {"Cache-Control": "no-store"}
        return HTMLResponse(html, status_code=503 if problem else 200, headers=headers)

    async def show_page(request: Request) -> Response:
        flash = take_flash(request) if control is not None else ""
        response = await render(page, request, flash)
        if flash:
            response.delete_cookie(FLASH_COOKIE, path="/", httponly=True, samesite="strict")
        return response

    async def show_content(request: Request) -> Response:
        return await render(content, request)

    async def show_css(request: Request) -> Response:
        return Response(css, media_type="text/css", headers={"Cache-Control": "no-cache"})

    routes: Sequence[BaseRoute] = [
        Route("/", show_page, methods=["GET"]),
        Route("/content", show_content, methods=["GET"]),
        Route("/dashboard.css", show_css, methods=["GET"]),
        *control_routes(control),
    ]
    return Starlette(routes=list(routes))
