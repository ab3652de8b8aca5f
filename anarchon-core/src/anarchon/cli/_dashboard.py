"""``anarchon dashboard URL``: serve a web page over the store (``anarchon[dashboard]``):
read-only, unless ``--allow-control`` adds pause, resume and trigger behind a token.

Starlette, uvicorn and Jinja2 are imported only when the command runs, so the rest of the CLI
works without the extra.
"""

from __future__ import annotations

import asyncio
import contextlib
import ipaddress
import logging
import secrets
import signal
import socket
from typing import TYPE_CHECKING

import click

from .._connect import connect
from .._durations import to_ms
from .._errors import ConfigError
from .._names import check_name
from .._urls import StoreURL
from ..abc import SupportsJobList
from . import CliError, configure_logging
from ._control import by_whom

if TYPE_CHECKING:
    from .._runtime.interval import JobSchedule

__all__ = ["dashboard", "is_loopback"]

log = logging.getLogger("anarchon.dashboard")

_EXTRA = "pip install 'anarchon[dashboard]'"
_MIN_REFRESH_MS = 500


def is_loopback(host: str) -> bool:
    """`host` is reachable from this machine only: ``localhost`` or a loopback address."""
    if host.lower() == "localhost":
        return True
    try:
        return ipaddress.ip_address(host.strip("[]")).is_loopback
    except ValueError:  # a host name: it may resolve to anything, now or later
        return False


def _listen(host: str, port: int) -> socket.socket:
    """Bind before serving, so a port in use is a one-line error and ``--port 0`` picks one."""
    try:
        infos = socket.getaddrinfo(host, port, type=socket.SOCK_STREAM, flags=socket.AI_PASSIVE)
    except socket.gaierror as exc:
        raise CliError(f"--host {host!r} cannot be resolved: {exc.strerror}") from None
    family, kind, proto, _, address = infos[0]
    sock = socket.socket(family, kind, proto)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    try:
        sock.bind(address)
    except OSError as exc:
        sock.close()
        raise CliError(
            f"cannot listen on {host}:{port}: {exc.strerror}; choose another --port "
            "(0 picks a free one)"
        ) from None
    sock.listen(128)
    sock.set_inheritable(True)
    return sock


def _schedules(target: str | None) -> dict[str, JobSchedule]:
    if target is None:
        return {}
    from ._run import load_scheduler

    scheduler = load_scheduler(target)
    return {name: spec.schedule for name, spec in scheduler.jobs.items() if spec.schedule}


@click.command()
@click.argument("url")
@click.option(
    "--host",
    default="127.0.0.1",
    show_default=True,
    help="Address to serve on. Anything but loopback needs --allow-remote.",
)
@click.option(
    "--port",
    default=8080,
    show_default=True,
    type=click.IntRange(0, 65535),
    help="Port to serve on; 0 picks a free one (the address is printed).",
)
@click.option(
    "--app",
    "target",
    metavar="MODULE:ATTR",
    default=None,
    help="Your Scheduler, as `anarchon run` takes it: its jobs and their next slots are shown.",
)
@click.option("--job", "jobs", multiple=True, help="Show only this job (repeatable).")
@click.option("--refresh", default="5s", show_default=True, help="How often the page refreshes.")
@click.option(
    "--slots",
    default=30,
    show_default=True,
    type=click.IntRange(1, 500),
    help="Recent slots per job on the timeline.",
)
@click.option(
    "--allow-remote",
    is_flag=True,
    help="Serve on a non-loopback --host. The page has no login: put your own in front.",
)
@click.option(
    "--allow-control",
    is_flag=True,
    help="Add Pause, Resume and Trigger now buttons, for browsers signed in with the token. "
    "The store is then also opened for writing.",
)
@click.option(
    "--control-token",
    envvar="ANARCHON_DASHBOARD_TOKEN",
    default=None,
    metavar="TOKEN",
    help="The token of --allow-control (at least 16 characters; env ANARCHON_DASHBOARD_TOKEN). "
    "Default: a random one, printed once in the sign-in link.",
)
@click.pass_context
def dashboard(
    ctx: click.Context,
    url: str,
    host: str,
    port: int,
    target: str | None,
    jobs: tuple[str, ...],
    refresh: str,
    slots: int,
    allow_remote: bool,
    allow_control: bool,
    control_token: str | None,
) -> None:
    """Serve a read-only web page over the store at URL: jobs and their next slots, a timeline
    of recent slots coloured by outcome, the instances seen in recent runs, the last errors. The
    page refreshes by itself. Needs `pip install 'anarchon[dashboard]'`.

    It serves on 127.0.0.1 only unless --host names another address and --allow-remote is
    given. Passwords in URL never appear on the page. Stop it with Ctrl-C or SIGTERM.

    The store is opened read-only: nothing is created or changed, and read rights are enough;
    a store that holds no anarchon data there is refused, naming where it looked (exit 5).

    With --allow-control the page also pauses, resumes and triggers jobs (where the store can),
    through a second, writable connection. It needs a token: the sign-in link printed at start
    carries it (or give your own with --control-token or ANARCHON_DASHBOARD_TOKEN).
    """
    configure_logging(ctx, "WARNING")
    parsed = StoreURL.parse(url)
    for job in jobs:
        check_name(job, what="job name")
    refresh_ms = to_ms(refresh, what="--refresh")
    if refresh_ms < _MIN_REFRESH_MS:
        raise ConfigError(f"--refresh {refresh!r} is too short: at least {_MIN_REFRESH_MS} ms")
    if not is_loopback(host) and not allow_remote:
        raise CliError(
            f"--host {host!r} is not a loopback address, and the dashboard has no login: anyone "
            "who can reach it sees your jobs and their errors. Serve on 127.0.0.1 (the default) "
            "and reach it through an SSH tunnel, or add --allow-remote behind your own proxy"
        )
    if control_token is not None and not allow_control:
        raise CliError("--control-token (or ANARCHON_DASHBOARD_TOKEN) needs --allow-control")
    generated = allow_control and not control_token
    token = secrets.token_urlsafe(24) if generated else (control_token or "")
    try:
        import uvicorn

        from ..dashboard import DashboardControl, DashboardSettings, create_app
        from ..dashboard._control import MIN_TOKEN_CHARS, dashboard_by
    except ImportError as exc:
        raise CliError(
            f"`anarchon dashboard` needs the dashboard extra ({exc.name or exc} is missing): "
            f"{_EXTRA}"
        ) from None
    schedules = _schedules(target)
    settings = DashboardSettings(
        url=parsed, jobs=jobs, schedules=schedules, refresh_ms=refresh_ms, slots=slots
    )
    if allow_control and len(token) < MIN_TOKEN_CHARS:
        raise CliError(
            f"--control-token must be at least {MIN_TOKEN_CHARS} characters; leave it out to "
            "have a random one generated"
        )
    sock = _listen(host, port)

    async def serve() -> None:
        async with contextlib.AsyncExitStack() as stack:
            store = await stack.enter_async_context(connect(parsed, read_only=True))
            if not store.capabilities.history:
                raise ConfigError(
                    f"store {parsed} keeps no run history ({parsed.scheme}:// has none)"
                )
            if not (jobs or schedules or isinstance(store, SupportsJobList)):
                raise ConfigError(
                    f"{parsed.scheme}:// cannot list its jobs; name them with --job JOB "
                    "(repeatable) or --app module:scheduler"
                )
            control = None
            if allow_control:
                # Opened after the read-only one has found anarchon's data: a typo in URL is
                # refused there, and never creates a store here.
                writable = await stack.enter_async_context(connect(parsed))
                control = DashboardControl(
                    store=writable, url=parsed, token=token, by=dashboard_by(by_whom())
                )
            config = uvicorn.Config(
                create_app(store, settings, control),
                log_level="warning",
                access_log=False,  # the sign-in link's query holds the token
                lifespan="off",
            )
            server = uvicorn.Server(config)
            bound_host, bound_port = sock.getsockname()[:2]
            shown_host = f"[{bound_host}]" if ":" in bound_host else bound_host
            address = f"http://{shown_host}:{bound_port}/"
            mode = "controls on" if allow_control else "read-only"
            click.echo(
                f"anarchon dashboard: serving {parsed} on {address} ({mode}; Ctrl-C stops it)",
                err=True,
            )
            if control is not None:
                if not (control.can_pause or control.can_trigger):
                    log.warning("store %s can neither pause nor trigger: no button shows", parsed)
                link = f"{address}login?token={token if generated else '<your token>'}"
                click.echo(f"anarchon dashboard: sign in to the controls at {link}", err=True)
            if not is_loopback(host):
                log.warning(
                    "serving on %s, reachable from the network; the page has no login", host
                )
            # uvicorn shuts down gracefully on SIGTERM, then raises the signal again for the
            # handler it found: a no-op one makes a stop by SIGTERM exit 0, as Ctrl-C does.
            previous = signal.signal(signal.SIGTERM, lambda signum, frame: None)
            try:
                await server.serve(sockets=[sock])
            finally:
                signal.signal(signal.SIGTERM, previous)

    try:
        asyncio.run(serve())
    except KeyboardInterrupt:
        return
    finally:
        sock.close()
