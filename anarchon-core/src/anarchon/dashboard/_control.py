"""The dashboard's controls (``--allow-control``): pause, resume and trigger a job from the page.

The security model, in full:

- The routes exist only when the dashboard is given a `DashboardControl`; without it the app
  has no POST route at all (404) and nothing on the page changes anything.
- A secret token guards them. ``GET /login?token=...`` compares it in constant time and, when
  it matches, sets a session cookie (HttpOnly, SameSite=Strict, a value derived from the token,
  not the token) and redirects to the page, so the token leaves the address bar. The token
  itself is never put in the page, in a cookie or in a log.
- Every action is a POST form that must carry both the session cookie and a CSRF field (a
  second value derived from the token), each compared in constant time. SameSite=Strict keeps
  other sites' forms from sending the cookie; the CSRF field is a second lock.
- Answers: a wrong or missing token, cookie or CSRF field 403; bad input, or a store without the
  capability, 400; a store that cannot be reached 503. A good action redirects (303) to the
  page with a one-time flash message.
"""

from __future__ import annotations

import hashlib
import hmac
import html
import time
from urllib.parse import parse_qsl, quote, unquote

import attrs
from starlette.requests import Request
from starlette.responses import HTMLResponse, RedirectResponse, Response
from starlette.routing import BaseRoute, Route

from .._control import MAX_CONTROL_TEXT
from .._errors import AnarchonError, ConfigError, StoreUnavailable
from .._names import check_name
from .._urls import StoreURL, redact
from ..abc import ClaimStore, SupportsPause, SupportsTrigger
from ..cli._control import _check_text, _pausable, _triggerable, parse_until
from ..cli._inspect import _iso

__all__ = ["MIN_TOKEN_CHARS", "UNTIL_CHOICES", "DashboardControl", "control_routes"]

MIN_TOKEN_CHARS = 16
SESSION_COOKIE = "anarchon_control"
FLASH_COOKIE = "anarchon_flash"
UNTIL_CHOICES: tuple[tuple[str, str], ...] = (
    ("", "until resumed"),
    ("15m", "for 15 min"),
    ("1h", "for 1 h"),
    ("4h", "for 4 h"),
)
"""(value, label) of the pause form's duration select; the value is ``--until``'s."""
_MAX_BODY = 8_192


def _derive(token: str, purpose: str) -> str:
    return hmac.new(token.encode(), purpose.encode(), hashlib.sha256).hexdigest()


@attrs.frozen(kw_only=True)
class DashboardControl:
    """What the controls need: the store to write to, the token, and who acts."""

    store: ClaimStore
    """The store opened for writing (the page itself reads through the read-only one)."""
    url: StoreURL
    token: str = attrs.field(repr=False)
    by: str
    """Recorded as the `by` of every pause and trigger: ``dashboard:user@host``."""

    def __attrs_post_init__(self) -> None:
        if len(self.token) < MIN_TOKEN_CHARS or not self.token.isprintable():
            raise ConfigError(
                f"the control token must be at least {MIN_TOKEN_CHARS} printable characters; "
                "leave --control-token out to have one generated"
            )

    @property
    def session(self) -> str:
        """The session cookie's value: derived from the token, never the token."""
        return _derive(self.token, "anarchon-dashboard-session")

    @property
    def csrf(self) -> str:
        """The hidden field every control form carries."""
        return _derive(self.token, "anarchon-dashboard-csrf")

    def signed_in(self, request: Request) -> bool:
        given = request.cookies.get(SESSION_COOKIE, "")
        return hmac.compare_digest(given.encode(), self.session.encode())

    @property
    def can_pause(self) -> bool:
        return isinstance(self.store, SupportsPause) and self.store.capabilities.pause

    @property
    def can_trigger(self) -> bool:
        return isinstance(self.store, SupportsTrigger) and self.store.capabilities.trigger


def take_flash(request: Request) -> str:
    """The message of the last action, if the request carries one."""
    return unquote(request.cookies.get(FLASH_COOKIE, ""))[:1_000]


def _page(status: int, title: str, text: str, root: str = "./") -> HTMLResponse:
    body = (
        '<!doctype html><html lang="en"><head><meta charset="utf-8">'
        f"<title>anarchon dashboard: {html.escape(title)}</title>"
        f'<link rel="stylesheet" href="{root}dashboard.css"></head><body><main>'
        f'<section class="problem" id="problem"><h2>{html.escape(title)}</h2>'
        f"<p>{html.escape(text)}</p></section>"
        f'<p><a href="{root}">Back to the dashboard</a></p></main></body></html>'
    )
    return HTMLResponse(body, status_code=status, headers={"Cache-Control": "no-store"})


def _done(message: str) -> Response:
    response = RedirectResponse("../", status_code=303)  # from /control/ACTION to the page
    response.set_cookie(
        FLASH_COOKIE, quote(message), max_age=60, httponly=True, samesite="strict", path="/"
    )
    return response


class _Refused(Exception):
    def __init__(self, status: int, title: str, text: str) -> None:
        super().__init__(text)
        self.status = status
        self.title = title
        self.text = text


def control_routes(control: DashboardControl | None) -> list[BaseRoute]:
    """The routes that change the store: none without `control` (``--allow-control``); with it,
    ``GET /login``, ``POST /control/pause``, ``/control/resume`` and ``/control/trigger``."""
    if control is None:
        return []

    async def login(request: Request) -> Response:
        given = request.query_params.get("token", "")
        if not hmac.compare_digest(given.encode(), control.token.encode()):
            return _page(
                403,
                "Wrong or missing token",
                "This link does not carry the dashboard's control token. Open the link the "
                "dashboard printed when it started (or /login?token=YOUR-TOKEN).",
            )
        response = RedirectResponse("./", status_code=303)
        response.set_cookie(
            SESSION_COOKIE, control.session, httponly=True, samesite="strict", path="/"
        )
        return response

    async def form(request: Request) -> dict[str, str]:
        body = await request.body()
        if len(body) > _MAX_BODY:
            raise _Refused(400, "Request too large", f"a control form is under {_MAX_BODY} bytes")
        fields = dict(parse_qsl(body.decode("utf-8", "replace"), keep_blank_values=True))
        if not control.signed_in(request):
            raise _Refused(
                403,
                "Not signed in",
                "Controls need the session of the token link: open the link the dashboard "
                "printed when it started, then try again.",
            )
        if not hmac.compare_digest(fields.get("csrf", "").encode(), control.csrf.encode()):
            raise _Refused(
                403, "Form refused", "The form's check field is missing or wrong: reload the page."
            )
        try:
            fields["job"] = check_name(fields.get("job", ""), what="job name")
            _check_text(fields.get("reason", ""), "reason")
        except ConfigError as exc:
            raise _Refused(400, "Bad request", str(exc)) from None
        return fields

    async def act(request: Request, action: str) -> Response:
        try:
            fields = await form(request)
            job = fields["job"]
            reason = fields.get("reason", "")
            try:
                if action == "trigger":
                    made = await _triggerable(control.store, control.url).trigger(
                        job, reason=reason, by=control.by
                    )
                    return _done(f"Triggered {job}: slot {_iso(made.slot)}; one instance runs it")
                pausable = _pausable(control.store, control.url)
                if action == "resume":
                    if await pausable.resume(job):
                        return _done(f"Resumed {job}: its next slots run again")
                    return _done(f"{job} was not paused; nothing to do")
                until = fields.get("until", "")
                until_ms = None
                if until:
                    now = await control.store.now_ms()
                    now = now if now is not None else time.time_ns() // 1_000_000
                    until_ms = parse_until(until, now)
                done = await pausable.pause(job, until_ms=until_ms, reason=reason, by=control.by)
                end = "until resumed" if done.until_ms is None else f"until {_iso(done.until_ms)}"
                return _done(f"Paused {job} {end}; its slots are skipped meanwhile")
            except StoreUnavailable as exc:
                raise _Refused(503, "The store cannot be reached", redact(str(exc))) from None
            except ConfigError as exc:
                raise _Refused(400, f"Cannot {action} {job}", redact(str(exc))) from None
            except AnarchonError as exc:
                text = f"{type(exc).__name__}: {redact(str(exc))}"
                raise _Refused(503, "The store refused", text) from None
        except _Refused as refused:
            return _page(refused.status, refused.title, refused.text, root="../")

    async def pause(request: Request) -> Response:
        return await act(request, "pause")

    async def resume(request: Request) -> Response:
        return await act(request, "resume")

    async def trigger(request: Request) -> Response:
        return await act(request, "trigger")

    return [
        Route("/login", login, methods=["GET"]),
        Route("/control/pause", pause, methods=["POST"]),
        Route("/control/resume", resume, methods=["POST"]),
        Route("/control/trigger", trigger, methods=["POST"]),
    ]


def dashboard_by(by: str) -> str:
    """The `by` the dashboard records: ``dashboard:user@host``, at most `MAX_CONTROL_TEXT`."""
    return f"dashboard:{by}"[:MAX_CONTROL_TEXT]
