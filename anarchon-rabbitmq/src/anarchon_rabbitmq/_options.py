"""Options of `amqp://` and `amqps://` (URL query parameters or keyword arguments of `connect`)."""

from __future__ import annotations

from typing import Any

import attrs

from anarchon import ConfigError, DurationMs, DurationMsOrZero, StoreOptions

__all__ = [
    "DEFAULT_PREPARE_AHEAD_MS",
    "DEFAULT_SLOT_TTL_MS",
    "MAX_SLOT_TTL_MS",
    "MIN_SLOT_TTL_MS",
    "RabbitMQOptions",
]

DEFAULT_SLOT_TTL_MS = 600_000
"""Ten minutes: far above the runtime's longest default ``max_late`` (one minute) plus skew, and
short enough that a job firing every second keeps only about 600 queues alive."""
MIN_SLOT_TTL_MS = 1_000
DEFAULT_PREPARE_AHEAD_MS = 60_000
"""A minute: time to create 10,000 queues before a slot (about 300 a second on the 2-core test
machine), well inside the default `slot_ttl_ms`."""
MAX_PREPARE_AHEAD_MS = 3_600_000
MAX_SLOT_TTL_MS = 7 * 86_400_000
"""A week: RabbitMQ keeps one queue per run for this long."""


def _bounded(low: int, high: int, unit: str = "") -> Any:
    def check(_: object, attribute: attrs.Attribute[int], value: object) -> None:
        if isinstance(value, bool) or not isinstance(value, int) or not low <= value <= high:
            raise ConfigError(f"{attribute.name} must be from {low} to {high}{unit}, got {value!r}")

    return check


def _optional_http_url(_: object, attribute: attrs.Attribute[str | None], value: object) -> None:
    if value is None:
        return
    if not isinstance(value, str):
        raise ConfigError(f"{attribute.name} must be a URL such as http://rabbitmq:15672")
    from ._management import check_management_url

    check_management_url(value)


def _optional_path(_: object, attribute: attrs.Attribute[str | None], value: object) -> None:
    if value is not None and (not isinstance(value, str) or not value):
        raise ConfigError(f"{attribute.name} must be a file path, got {value!r}")


QUEUE_TYPES_REFUSED = {
    "quorum": "a quorum queue overshoots x-max-length (it accepted a second message at "
    "max-length 1 on RabbitMQ 3.10): two instances could win the same run",
    "stream": "a stream queue has no reject-publish length limit at all: every instance would win",
}


def _classic_only(_: object, attribute: attrs.Attribute[str], value: object) -> None:
    if value == "classic":
        return
    why = QUEUE_TYPES_REFUSED.get(str(value))
    reason = why or "the only type whose x-max-length: 1 with reject-publish refuses a second claim"
    raise ConfigError(
        f"queue_type must be classic, got {value!r}: {reason}. Claim queues are always durable "
        "classic queues, declared with an explicit x-queue-type, so a virtual host's default "
        "queue type does not change them; on a cluster a classic queue lives on one node (see "
        "the RabbitMQ page of the docs: Clusters)"
    )


@attrs.frozen(kw_only=True)
class RabbitMQOptions(StoreOptions):
    """Options of the RabbitMQ store. ``history_limit`` and ``retention_margin_ms`` (common to all
    stores) are accepted and unused: RabbitMQ keeps no history and forgets a run with its queue."""

    slot_ttl_ms: DurationMs = attrs.field(
        default=DurationMs(DEFAULT_SLOT_TTL_MS),
        validator=_bounded(MIN_SLOT_TTL_MS, MAX_SLOT_TTL_MS, " ms (1 s to 7 days)"),
    )
    """The ``x-expires`` of each run's queue: RabbitMQ deletes it, and forgets the run, this long
    after the queue was created (by the first claim, or ahead of its slot by `prepare`). The
    store remembers a run ``slot_ttl_ms - prepare_ahead_ms`` after its slot
    (`Capabilities.remembers_ms`), so the scheduler refuses a job whose ``max_late`` plus clock
    skew exceeds that (T3). Every instance of a deployment must use the same value (RabbitMQ
    refuses a queue declared with another one)."""
    prepare_ahead_ms: DurationMsOrZero = attrs.field(
        default=DurationMsOrZero(DEFAULT_PREPARE_AHEAD_MS),
        validator=_bounded(0, MAX_PREPARE_AHEAD_MS, " ms (0 to 1 hour)"),
    )
    """How long before a slot the scheduler declares its runs' queues, so that the winning claim
    finds its queue made (creating a durable queue is most of a new run's cost). At most half of
    `slot_ttl_ms` is used; 0 turns preparing off. It never changes an outcome, but a queue made
    earlier expires earlier: the store remembers a run ``slot_ttl_ms`` minus this after its slot."""
    queue_type: str = attrs.field(default="classic", validator=_classic_only)
    """Only ``classic``; accepted so that a user who asks for ``quorum`` or ``stream`` is told
    why not (`ConfigError`) instead of getting an unknown-option error. Quorum queues overshoot
    ``x-max-length`` and stream queues have no such limit: either could let two instances win."""
    channels: int = attrs.field(default=4, validator=_bounded(1, 64))
    """Confirm channels per store, used in turn: RabbitMQ creates queues in parallel across
    channels, so concurrent first claims of many jobs finish sooner."""
    connect_timeout_ms: DurationMs = attrs.field(
        default=DurationMs(5_000), validator=_bounded(100, 300_000, " ms")
    )
    """Longest a connection attempt (TCP, TLS, AMQP handshake, channels) may take."""
    confirm_timeout_ms: DurationMs = attrs.field(
        default=DurationMs(8_000), validator=_bounded(100, 300_000, " ms")
    )
    """Longest a claim waits for the broker's confirm; past it the claim is `unknown` (C3)."""
    heartbeat_s: int = attrs.field(default=60, validator=_bounded(0, 3_600, " s"))
    """AMQP heartbeat, so a dead connection is noticed between claims (0 turns it off)."""
    cafile: str | None = attrs.field(default=None, validator=_optional_path)
    """amqps: CA bundle to verify the broker's certificate (default: the system's)."""
    certfile: str | None = attrs.field(default=None, validator=_optional_path)
    """amqps: client certificate, for brokers that require one."""
    keyfile: str | None = attrs.field(default=None, validator=_optional_path)
    """amqps: the client certificate's private key."""
    verify: bool = True
    """amqps: verify the broker's certificate and host name. Turn off only for tests."""
    management_url: str | None = attrs.field(default=None, validator=_optional_http_url)
    """The management plugin's HTTP API, such as ``http://rabbitmq:15672``: the only way to
    list the jobs (`jobs`, ``anarchon status``), since AMQP cannot list queues. The AMQP URL's
    user and password are sent unless this URL has its own; the user needs the ``management``
    or ``monitoring`` tag. For https, `cafile` and `verify` apply. Unset, the job list says how
    to set it."""
