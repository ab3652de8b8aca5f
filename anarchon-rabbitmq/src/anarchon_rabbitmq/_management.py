"""The job list of `amqp://`, read from the management plugin's HTTP API (``management_url``).

AMQP 0-9-1 cannot list queues, and a run is nothing but its queue
(``<prefix>.<job>.slot.<slot>``), so the jobs with a remembered run are the jobs named by the
queues that exist. Two ways were weighed:

* **The management API** (chosen). ``GET /api/queues/<vhost>`` filtered by a regular expression
  on the name lists exactly the runs RabbitMQ still remembers: the same source of truth as the
  claims, never out of step with it. It adds nothing to the broker and nothing to a claim, and it
  only reads: listing a queue does not restart its expiry (a declaration would, even a passive
  one). A monitoring user needs the ``management`` (or ``monitoring``) tag and read permission.
  The plugin is not on every broker, so the option is optional, and without it `jobs` says how
  to turn it on instead of guessing a port.
* **A registry** the store keeps (a stream of job names written when a scheduler starts). It
  works on any broker, but it is a second record that can disagree with the queues: a job
  claimed only through `anarchon.once` never registers, a registry entry outlives or predates
  the runs, every start writes to it, and AMQP gives a stream reader no way to know it has read
  to the end (a passive declaration of a stream reports 0 messages).

Queues are read a page at a time (`PAGE_SIZE`), with statistics off so the broker does little
work; requests run in a worker thread with the standard library's HTTP client (the package
needs no HTTP dependency).
"""

from __future__ import annotations

import asyncio
import base64
import json
import re
import ssl
import urllib.error
import urllib.request
from typing import Any
from urllib.parse import quote, unquote, urlencode, urlsplit

from anarchon import (
    AnarchonError,
    ConfigError,
    StoreCorrupt,
    StoreNotSetUp,
    StoreUnavailable,
    StoreURL,
    redact,
)

from ._options import RabbitMQOptions

__all__ = ["PAGE_SIZE", "Management", "cannot_list", "check_management_url"]

PAGE_SIZE = 500
"""Queues per page of ``/api/queues`` (the API allows up to 500)."""
_JOB = re.compile(r"[A-Za-z0-9][A-Za-z0-9_-]{0,99}")


def check_management_url(value: str) -> str:
    """`value` if it is an ``http://`` or ``https://`` URL with a host, else `ConfigError`."""
    parts = urlsplit(value)
    if parts.scheme not in ("http", "https") or not parts.hostname:
        raise ConfigError(
            f"management_url must be the management plugin's address, such as "
            f"http://rabbitmq:15672, got {redact(value)!r}"
        )
    return value


def cannot_list(where: str) -> ConfigError:
    """The error of `jobs` on a store without ``management_url``."""
    return ConfigError(
        f"RabbitMQ at {where} cannot list its jobs over AMQP (it has no way to list queues): "
        "set management_url to the management plugin's HTTP API, such as "
        "?management_url=http://HOST:15672 (the user needs the management or monitoring tag), "
        "or name the jobs"
    )


class Management:
    """Reads the runs' queues of one prefix in one virtual host through the HTTP API at
    `options.management_url`, with the AMQP URL's user and password unless the management
    URL carries its own."""

    def __init__(self, url: StoreURL, options: RabbitMQOptions) -> None:
        assert options.management_url is not None
        parts = urlsplit(check_management_url(options.management_url))
        self.prefix = options.prefix
        self.vhost = url.path or "/"
        user = unquote(parts.username) if parts.username else url.username or "guest"
        password = unquote(parts.password) if parts.password else url.password or "guest"
        self._secrets = tuple(s for s in (password, parts.password) if s)
        self._auth = "Basic " + base64.b64encode(f"{user}:{password}".encode()).decode()
        netloc = parts.hostname or ""
        if parts.port:
            netloc += f":{parts.port}"
        self._base = f"{parts.scheme}://{netloc}{parts.path.rstrip('/')}"
        self.shown = self._base
        self._timeout = options.connect_timeout_ms / 1000
        self._context: ssl.SSLContext | None = None
        if parts.scheme == "https":
            self._context = ssl.create_default_context(cafile=options.cafile)
            if not options.verify:
                self._context.check_hostname = False
                self._context.verify_mode = ssl.CERT_NONE
        self._pattern = rf"^{re.escape(self.prefix)}\.[^.]+\.slot\.[0-9]+$"

    def _scrub(self, text: str) -> str:
        text = redact(text)
        for secret in self._secrets:
            text = text.replace(secret, "***")
        return text

    def _get(self, path: str, query: dict[str, str]) -> Any:
        request = urllib.request.Request(
            f"{self._base}{path}?{urlencode(query)}",
            headers={"Authorization": self._auth, "Accept": "application/json"},
        )
        where = f"RabbitMQ's management API at {self.shown}"
        try:
            with urllib.request.urlopen(
                request, timeout=self._timeout, context=self._context
            ) as answer:
                data = answer.read()
        except urllib.error.HTTPError as exc:
            if exc.code == 401:
                raise ConfigError(
                    f"{where} refused the login (401): check the user and password (not shown), "
                    "and that the user has the management or monitoring tag "
                    "(rabbitmqctl set_user_tags USER monitoring)"
                ) from None
            if exc.code == 404:
                raise ConfigError(
                    f"{where}: {path} not found (404): the virtual host {self.vhost!r} does not "
                    "exist, or management_url does not point at the management API"
                ) from None
            raise StoreUnavailable(f"{where} answered {exc.code} {exc.reason}") from None
        except (OSError, ValueError) as exc:  # URLError and timeouts are OSErrors
            raise StoreUnavailable(
                f"{where} cannot be reached ({self._scrub(f'{type(exc).__name__}: {exc}')}); "
                "is the management plugin on (rabbitmq-plugins enable rabbitmq_management)?"
            ) from None
        try:
            return json.loads(data)
        except ValueError:
            raise StoreCorrupt(f"{where} answered something that is not JSON") from None

    def _queue_names(self, page_size: int) -> list[str]:
        names: list[str] = []
        page = 1
        while True:
            answer = self._get(
                f"/api/queues/{quote(self.vhost, safe='')}",
                {
                    "page": str(page),
                    "page_size": str(page_size),
                    "name": self._pattern,
                    "use_regex": "true",
                    "columns": "name",
                    "disable_stats": "true",
                },
            )
            items = answer.get("items") if isinstance(answer, dict) else None
            if not isinstance(items, list):
                raise StoreCorrupt(
                    f"RabbitMQ's management API at {self.shown} answered no page of queues"
                )
            names += [item["name"] for item in items if isinstance(item.get("name"), str)]
            if page >= int(answer.get("page_count") or 0):
                return names
            page += 1

    async def queue_names(self, page_size: int = PAGE_SIZE) -> list[str]:
        """The names of the prefix's run queues that exist now."""
        try:
            return await asyncio.to_thread(self._queue_names, page_size)
        except AnarchonError:
            raise
        except (KeyError, TypeError, AttributeError):
            raise StoreCorrupt(
                f"RabbitMQ's management API at {self.shown} answered queues without names"
            ) from None

    async def jobs(self, page_size: int = PAGE_SIZE) -> list[str]:
        """The jobs with a run queue, sorted (a name that is no job's is left out)."""
        names = {name.split(".")[1] for name in await self.queue_names(page_size)}
        return sorted(name for name in names if _JOB.fullmatch(name))

    async def require_runs(self, where: str, slot_ttl_ms: int) -> None:
        """`StoreNotSetUp` when the prefix has no run queue in the virtual host."""
        if not await self.queue_names():
            raise StoreNotSetUp(
                f"RabbitMQ at {where}: no run queue of prefix {self.prefix!r} in virtual host "
                f"{self.vhost!r} (asked {self.shown}). Check the prefix option and the URL's "
                f"virtual host; RabbitMQ forgets a run slot_ttl ({slot_ttl_ms} ms) after its "
                "queue was made, so a deployment idle that long has nothing to show either"
            )
