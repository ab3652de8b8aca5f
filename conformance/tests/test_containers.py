"""`anarchon_conformance.containers`: the environment first, then a container, else a skip that
says why; a container whose server never answers fails the test instead.

The tests that start containers need a Docker engine (``scripts/container-images`` prepares one
and the local images); without one they skip, as the module's users do.
"""

from __future__ import annotations

import socket
import uuid

import docker
import pytest

from anarchon_conformance.containers import (
    NATS,
    POSTGRES,
    REDIS,
    ContainerError,
    Server,
    container_url,
    docker_error,
    server_url,
)


def _unique(name: str) -> str:
    return f"{name}{uuid.uuid4().hex[:8]}"


def _require_docker() -> None:
    reason = docker_error()
    if reason is not None:
        pytest.skip(reason)


def test_environment_names_the_variables() -> None:
    assert REDIS.url_env == "ANARCHON_TEST_REDIS_URL"
    assert REDIS.image_env == "ANARCHON_TEST_REDIS_IMAGE"
    assert POSTGRES.url_env == "ANARCHON_TEST_POSTGRES_URL"
    assert Server(name="etc-d", image="x", port=1, url="").image_env == "ANARCHON_TEST_ETC_D_IMAGE"


def test_a_url_from_the_environment_comes_first(monkeypatch: pytest.MonkeyPatch) -> None:
    server = Server(name=_unique("Env"), image="never-started", port=1, url="x://{host}:{port}")
    monkeypatch.setenv(server.url_env, "x://db.example:1234")
    monkeypatch.setenv("ANARCHON_TEST_CONTAINERS_ERROR", "this must not be consulted")
    assert server_url(server) == "x://db.example:1234"


def test_no_docker_skips_with_the_reason(monkeypatch: pytest.MonkeyPatch) -> None:
    server = Server(name=_unique("NoDocker"), image="never-started", port=1, url="x://{host}")
    monkeypatch.setenv("ANARCHON_TEST_CONTAINERS_ERROR", "dockerd did not answer within 30 s")
    with pytest.raises(pytest.skip.Exception) as skipped:
        server_url(server)
    message = str(skipped.value)
    assert "dockerd did not answer within 30 s" in message
    assert f"set {server.url_env}" in message


@pytest.mark.services
def test_an_image_neither_here_nor_pullable_skips(monkeypatch: pytest.MonkeyPatch) -> None:
    _require_docker()
    image = f"anarchon/no-such-image-{uuid.uuid4().hex[:8]}:never"
    server = Server(name=_unique("Missing"), image=image, port=1, url="x://{host}:{port}")
    monkeypatch.delenv(server.image_env, raising=False)
    with pytest.raises(pytest.skip.Exception) as skipped:
        container_url(server)
    assert f"image {image} is not here and could not be pulled" in str(skipped.value)
    assert server.image_env in str(skipped.value)


@pytest.mark.services
def test_a_server_that_never_answers_fails_with_its_log() -> None:
    """The container exits at once: a failure (not a skip) that shows the container's log."""
    _require_docker()
    server = Server(
        name=_unique("Broken"),
        image=REDIS.image_name(),
        port=6379,
        url="redis://{host}:{port}/0",
        command=["sh", "-c", "echo the server is broken; exit 3"],
        hello=b"PING\r\n",
        ready=b"+PONG",
        start_timeout_s=20,
    )
    with pytest.raises(ContainerError) as failed:
        container_url(server)
    assert "did not answer" in str(failed.value)
    assert "the server is broken" in str(failed.value)
    with pytest.raises(ContainerError):  # remembered: not started again for every test
        container_url(server)


@pytest.mark.services
def test_a_container_answers_on_loopback_only() -> None:
    _require_docker()
    url = container_url(REDIS)
    host, port = url.split("://", 1)[1].split("/", 1)[0].rsplit(":", 1)
    assert host == "127.0.0.1"
    with socket.create_connection((host, int(port)), timeout=5) as sock:
        sock.sendall(b"PING\r\n")
        assert sock.recv(16).startswith(b"+PONG")
    assert container_url(REDIS) == url  # one container per server and process
    client = docker.from_env()
    try:
        (container,) = [
            c
            for c in client.containers.list(filters={"name": "anarchon-test-redis-"})
            if any(b["HostPort"] == port for b in c.ports.get("6379/tcp") or [])
        ]
        assert [b["HostIp"] for b in container.ports["6379/tcp"]] == ["127.0.0.1"]
    finally:
        client.close()


@pytest.mark.services
def test_nats_starts_with_jetstream() -> None:
    """The NATS spec passes ``-js`` as the official image expects; the server says so."""
    _require_docker()
    url = container_url(NATS)
    host, port = url.split("://", 1)[1].rsplit(":", 1)
    with socket.create_connection((host, int(port)), timeout=5) as sock:
        info = sock.recv(4096)
    assert info.startswith(b"INFO ")
    assert b'"jetstream":true' in info, info
