"""A backend's server for its tests: from the environment, else in a throwaway container.

`server_url(REDIS)` is the URL of the server the environment names (``ANARCHON_TEST_REDIS_URL``);
without one, the URL of a container started through testcontainers when a Docker engine
answers; else the test is skipped with the reason. `container_url(REDIS)` always uses a container
(the tests that certify a backend *through* a container). One container per server and test
process, started on first use, published on 127.0.0.1 only, removed when the process ends.

The image is the official one (``redis:7``, ``postgres:16``, ``nats:2``) unless the environment
names another (``ANARCHON_TEST_REDIS_IMAGE``): where no registry is reachable, build them from
Debian's packages with ``scripts/container-images``, which prints those variables. An image that is
neither present nor pullable skips the tests with the reason; a container that starts but never
answers fails them. testcontainers' reaper container (Ryuk) is not used unless
``TESTCONTAINERS_RYUK_DISABLED=false``: the containers are removed here, at exit.

A third-party backend describes its own server with `Server`::

    ETCD = Server(
        name="etcd", image="quay.io/coreos/etcd:v3.5.17", port=2379, url="http://{host}:{port}",
        command=["etcd", "--listen-client-urls", "http://0.0.0.0:2379",
                 "--advertise-client-urls", "http://127.0.0.1:2379"],
    )

Needs the ``containers`` extra: ``pip install 'anarchon-conformance[containers]'``.
"""

from __future__ import annotations

import atexit
import gc
import logging
import os
import socket
import struct
import threading
import time
import uuid
import warnings
from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Any

import attrs
import pytest

if TYPE_CHECKING:
    from testcontainers.core.container import DockerContainer

__all__ = [
    "NATS",
    "POSTGRES",
    "REDIS",
    "ContainerError",
    "Server",
    "container_url",
    "docker_error",
    "server_url",
    "stop_containers",
]

_log = logging.getLogger(__name__)


@attrs.frozen(kw_only=True)
class Server:
    """How to reach one kind of server in a container, and how to tell that it answers."""

    name: str
    """Shown in skip reasons (``"Redis"``); also names the environment variables below."""
    image: str
    """The image used unless `image_env` names another: an official one, pulled if missing."""
    port: int
    """The port the server listens on inside the container."""
    url: str
    """The server's URL, with ``{host}`` and ``{port}`` for the published address."""
    env: Mapping[str, str] = attrs.field(factory=dict)
    """Environment of the container (``POSTGRES_PASSWORD``...)."""
    command: Sequence[str] | None = None
    """Arguments for the image's entry point; None for its default command."""
    hello: bytes = b""
    """Sent on a fresh connection to ask whether the server is ready (Redis: ``PING``)."""
    ready: bytes = b""
    """What a ready server's first answer starts with. Empty: any answer of at least one byte
    (a TCP connect alone proves nothing: Docker's port proxy accepts before the server listens)."""
    start_timeout_s: float = 90.0
    """How long a started container may take to answer (the official PostgreSQL image runs
    initdb first)."""

    key: str = attrs.field()
    """Names the environment variables below (``REDIS``); defaults to `name` in capitals."""

    @key.default
    def _key_from_name(self) -> str:
        return "".join(c if c.isalnum() else "_" for c in self.name.upper())

    @property
    def url_env(self) -> str:
        """The variable that names a running server instead (``ANARCHON_TEST_REDIS_URL``)."""
        return f"ANARCHON_TEST_{self.key}_URL"

    @property
    def image_env(self) -> str:
        """The variable that names another image (``ANARCHON_TEST_REDIS_IMAGE``)."""
        return f"ANARCHON_TEST_{self.key}_IMAGE"

    def image_name(self) -> str:
        return os.environ.get(self.image_env) or self.image


def _postgres_startup(user: str, database: str) -> bytes:
    """A PostgreSQL StartupMessage: a ready server answers it with ``R`` (an authentication
    request), one that is still starting with ``E`` ("the database system is starting up")."""
    body = struct.pack("!i", 196608) + f"user\0{user}\0database\0{database}\0\0".encode()
    return struct.pack("!i", len(body) + 4) + body


REDIS = Server(
    name="Redis",
    image="redis:7",
    port=6379,
    url="redis://{host}:{port}/0",
    hello=b"PING\r\n",
    ready=b"+PONG",
)
POSTGRES = Server(
    name="PostgreSQL",
    key="POSTGRES",
    image="postgres:16",
    port=5432,
    url="postgresql://postgres:anarchon@{host}:{port}/test",
    env={"POSTGRES_PASSWORD": "anarchon", "POSTGRES_DB": "test"},
    hello=_postgres_startup("postgres", "test"),
    ready=b"R",
)
NATS = Server(
    name="NATS",
    image="nats:2",
    port=4222,
    url="nats://{host}:{port}",
    command=["-js"],
    ready=b"INFO",
)


class ContainerError(RuntimeError):
    """A container started but its server never answered."""


def docker_error() -> str | None:
    """Why no container can be started here (no testcontainers, no Docker engine), or None."""
    reason = os.environ.get("ANARCHON_TEST_CONTAINERS_ERROR")
    if reason:
        return f"Docker could not be prepared: {reason}"
    try:
        from docker.errors import DockerException
        from testcontainers.core.docker_client import DockerClient
    except ImportError as exc:
        return f"testcontainers is not installed ({exc}): pip install 'anarchon-conformance[containers]'"
    # docker-py leaves the socket of a failed connection to the garbage collector: collect it
    # here, where its ResourceWarning is expected, not in some later test.
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", ResourceWarning)
        try:
            client = DockerClient(timeout=5)
            try:
                client.client.ping()
            finally:
                client.client.close()
        except (DockerException, OSError) as exc:  # requests' errors are OSErrors
            return f"no Docker engine answers ({type(exc).__name__}: {exc})"
        finally:
            gc.collect()
    return None


def server_url(server: Server) -> str:
    """The URL of a `server`: from ``server.url_env`` if set, else of a container, else skip."""
    given = os.environ.get(server.url_env)
    if given:
        return given
    return container_url(server, hint=f" or set {server.url_env}")


def container_url(server: Server, *, hint: str = "") -> str:
    """The URL of this process's container of `server`, started on first use; skips the test
    when Docker or the image cannot be had, fails it when the server never answers."""
    key = (server.name, server.image_name())
    with _lock:
        outcome = _outcomes.get(key)
        if outcome is None:
            try:
                outcome = _start(server)
            except (_Unavailable, ContainerError) as exc:
                outcome = exc
            _outcomes[key] = outcome
    if isinstance(outcome, _Unavailable):
        pytest.skip(f"no {server.name} container: {outcome}{hint}")
    if isinstance(outcome, ContainerError):
        raise ContainerError(str(outcome))
    return outcome


class _Unavailable(Exception):
    """No container can be had here: the test skips with this reason."""


_lock = threading.Lock()
_outcomes: dict[tuple[str, str], str | _Unavailable | ContainerError] = {}
_containers: list[DockerContainer] = []


def _start(server: Server) -> str:
    reason = docker_error()
    if reason is not None:
        raise _Unavailable(reason)
    import docker.errors
    from testcontainers.core.config import testcontainers_config as config
    from testcontainers.core.container import DockerContainer

    if "TESTCONTAINERS_RYUK_DISABLED" not in os.environ and "ryuk.disabled" not in (
        config.tc_properties
    ):
        config.ryuk_disabled = True  # no reaper image to pull: the containers go at exit
    image = server.image_name()
    container = DockerContainer(image)
    # The pid lets scripts/container-images remove what a killed test process left behind.
    container.with_name(f"anarchon-test-{server.key.lower()}-{os.getpid()}-{uuid.uuid4().hex[:8]}")
    container.with_envs(**server.env)
    if server.command is not None:
        container.with_command(list(server.command))
    ports: dict[str, Any] = container.ports
    ports[f"{server.port}/tcp"] = ("127.0.0.1", None)  # published on loopback only
    images = container.get_docker_client().client.images
    try:
        images.get(image)
    except docker.errors.ImageNotFound:
        try:
            images.pull(image)
        except docker.errors.APIError as exc:
            raise _Unavailable(
                f"image {image} is not here and could not be pulled ({exc.explanation}): build "
                f"it (scripts/container-images) or set {server.image_env}"
            ) from exc
    try:
        container.start()
    except docker.errors.APIError as exc:
        _remove(container)
        raise ContainerError(f"{server.name} in a container of {image}: {exc}") from exc
    _containers.append(container)
    bindings = container.get_docker_client().client.api.port(
        container.get_container_id(), server.port
    )
    if not bindings:  # exited already
        raise _failure(server, container, image, "its port was never published")
    port = int(bindings[0]["HostPort"])
    _wait_ready(server, port, container, image)
    return server.url.format(host="127.0.0.1", port=port)


def _wait_ready(server: Server, port: int, container: DockerContainer, image: str) -> None:
    deadline = time.monotonic() + server.start_timeout_s
    last = "no answer yet"
    while time.monotonic() < deadline:
        try:
            with socket.create_connection(("127.0.0.1", port), timeout=2) as sock:
                if server.hello:
                    sock.sendall(server.hello)
                answer = sock.recv(64)
            if answer and answer.startswith(server.ready):
                return
            last = f"answered {answer[:40]!r}"
        except OSError as exc:
            last = f"{type(exc).__name__}: {exc}"
        container.reload()
        if container.status not in ("created", "running"):
            break
        time.sleep(0.1)
    raise _failure(server, container, image, f"on 127.0.0.1:{port}, last: {last}")


def _failure(server: Server, container: DockerContainer, image: str, detail: str) -> ContainerError:
    container.reload()
    logs = b"".join(container.get_logs()).decode(errors="replace")[-2000:]
    return ContainerError(
        f"{server.name} in a container of {image} did not answer within "
        f"{server.start_timeout_s:g} s (status {container.status}, {detail}); its log ends:\n{logs}"
    )


def _remove(container: DockerContainer) -> None:
    from docker.errors import DockerException

    try:
        container.stop()
    except (DockerException, OSError) as exc:  # already gone, or the engine stopped first
        _log.warning("could not remove container %s: %s", container.get_container_id(), exc)


@atexit.register
def stop_containers() -> None:
    """Remove every container this process started (also run at exit)."""
    with _lock:
        containers, _containers[:] = list(_containers), []
        _outcomes.clear()
    for container in containers:
        _remove(container)
