"""The claims stream: its settings, and creating or checking it on open.

One stream per prefix. Its subjects have the strategy's shape (`Strategy.pattern`), so two
strategies can never share a stream (they would not see each other's claims):
``<prefix>.*.claims`` for msg-id, ``<prefix>.*.slot.*`` for expected-seq. An existing stream with other settings is refused with a
`ConfigError` and left as it is: changing a duplicate window or an age would make NATS forget
claims.

A store opened read-only (`find_stream`) only looks the stream up: a missing one is
`StoreNotSetUp`, one of the other strategy a `ConfigError` naming it. Its windows and limits are
not compared: they decide how long claims are kept, not where they are read, so a monitoring
user need not repeat them.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from nats.js import JetStreamContext
from nats.js.api import DiscardPolicy, RetentionPolicy, StorageType, StreamConfig
from nats.js.errors import APIError, NotFoundError

from anarchon import ConfigError, StoreNotSetUp

if TYPE_CHECKING:
    from ._connection import Link
    from ._options import NATSOptions
    from ._strategies import Strategy

__all__ = ["check_config", "ensure_stream", "find_stream", "stream_config"]

ERR_STREAM_NAME_IN_USE = 10058
ERR_SUBJECTS_OVERLAP = 10065
ERR_NO_PEERS = 10005
"""``no suitable peers for placement``: fewer JetStream servers in the cluster than replicas."""
ERR_REPLICAS_NOT_CLUSTERED = 10074
"""``replicas > 1 not supported in non-clustered mode``."""
ERR_INSUFFICIENT_RESOURCES = 10023


def placement_error(exc: APIError, options: NATSOptions, where: str) -> ConfigError | None:
    """The `ConfigError` for a stream the server cannot place with ``replicas`` copies, or None
    when `exc` is another refusal."""
    if exc.err_code not in (ERR_NO_PEERS, ERR_REPLICAS_NOT_CLUSTERED, ERR_INSUFFICIENT_RESOURCES):
        return None
    return ConfigError(
        f"NATS at {where}: cannot create stream {options.stream_name} with replicas="
        f"{options.replicas} ({exc.description}): replicas must not exceed the JetStream servers "
        "of the cluster that are up (1 on a server that is not clustered). Lower replicas, or "
        "start the missing servers; replicas=3 on a cluster of three survives the loss of one"
    )


def stream_config(strategy: Strategy, options: NATSOptions) -> StreamConfig:
    window = strategy.duplicate_window_ms
    return StreamConfig(
        name=options.stream_name,
        description=f"anarchon claims of prefix {options.prefix} (strategy {options.strategy})",
        subjects=[strategy.pattern],
        retention=RetentionPolicy.LIMITS,
        discard=DiscardPolicy.OLD,
        max_msgs=-1,
        max_bytes=-1,
        max_msgs_per_subject=-1,
        max_age=options.max_age_ms / 1000,
        storage=StorageType.FILE if options.storage == "file" else StorageType.MEMORY,
        num_replicas=options.replicas,
        # A strategy that sends no message ids leaves the server's default window (0).
        duplicate_window=window / 1000 if window else 0,
    )


def _wanted(strategy: Strategy, options: NATSOptions) -> dict[str, Any]:
    """The settings anarchon relies on, as the server reports them."""
    config = stream_config(strategy, options)
    wanted: dict[str, Any] = {
        "subjects": config.subjects,
        "retention": "limits",
        "storage": "file" if options.storage == "file" else "memory",
        "num_replicas": options.replicas,
        "max_age_ms": options.max_age_ms,
        # Limits that delete claims before max_age would forget runs (T3).
        "max_msgs": -1,
        "max_bytes": -1,
        "max_msgs_per_subject": -1,
        "no_ack": False,
        "sealed": False,
    }
    if strategy.duplicate_window_ms:
        wanted["duplicate_window_ms"] = strategy.duplicate_window_ms
    return wanted


def _actual(config: StreamConfig) -> dict[str, Any]:
    def enum_value(value: Any) -> Any:
        return getattr(value, "value", value)

    return {
        "subjects": list(config.subjects or []),
        "retention": enum_value(config.retention),
        "storage": enum_value(config.storage),
        "num_replicas": config.num_replicas or 1,
        "max_age_ms": round((config.max_age or 0) * 1000),
        "max_msgs": config.max_msgs if config.max_msgs is not None else -1,
        "max_bytes": config.max_bytes if config.max_bytes is not None else -1,
        "max_msgs_per_subject": config.max_msgs_per_subject,
        "no_ack": bool(config.no_ack),
        "sealed": bool(config.sealed),
        "duplicate_window_ms": round((config.duplicate_window or 0) * 1000),
    }


def check_config(
    strategy: Strategy, options: NATSOptions, config: StreamConfig, where: str
) -> None:
    """`ConfigError` naming every setting of the existing stream that differs from ours."""
    wanted, actual = _wanted(strategy, options), _actual(config)
    wrong = [f"{k} is {actual[k]!r}, expected {v!r}" for k, v in wanted.items() if actual[k] != v]
    if wrong:
        hint = ""
        if config.subjects and config.subjects != wanted["subjects"]:
            hint = " (a stream of another strategy or prefix?)"
        raise ConfigError(
            f"NATS at {where}: stream {options.stream_name} exists with other settings{hint}: "
            + "; ".join(wrong)
            + ". anarchon never changes a stream (that can make NATS forget claims): open with "
            "the stream's settings, use another prefix or stream name, or change the stream "
            "with `nats stream edit` while no instance runs"
        )


async def ensure_stream(
    js: JetStreamContext, strategy: Strategy, options: NATSOptions, where: str
) -> None:
    """Create the stream, or check the one that exists. Safe when many instances start at once:
    creating a stream with the same settings twice is a no-op for the server."""
    name = options.stream_name
    try:
        info = await js.stream_info(name)
    except NotFoundError:
        try:
            info = await js.add_stream(stream_config(strategy, options))
        except APIError as exc:
            placement = placement_error(exc, options, where)
            if placement is not None:
                raise placement from None
            if exc.err_code not in (ERR_SUBJECTS_OVERLAP, ERR_STREAM_NAME_IN_USE):
                raise
            # Another instance may have created it a moment ago (the server then answers
            # either error): check that one. Otherwise another stream holds our subjects.
            try:
                info = await js.stream_info(name)
            except NotFoundError:
                raise ConfigError(
                    f"NATS at {where}: cannot create stream {name}: its subjects "
                    f"{[strategy.pattern]} overlap another stream's "
                    f"({exc.description}). Use another prefix, or remove the other stream's "
                    "subjects"
                ) from None
    check_config(strategy, options, info.config, where)


async def find_stream(link: Link, strategy: Strategy, options: NATSOptions) -> None:
    """Look the stream up, creating and changing nothing: `StoreNotSetUp` when it does not
    exist, `ConfigError` when it holds another strategy's claims or is not anarchon's."""
    from ._strategies import STRATEGIES  # the strategies import this module

    name = options.stream_name
    try:
        info = await link.js.stream_info(name)
    except NotFoundError:
        raise StoreNotSetUp(
            f"NATS at {link.where}: there is no stream {name}, so no anarchon claims to read. "
            f"The stream option names it (default ANARCHON_<prefix>; prefix is "
            f"{options.prefix!r}): check prefix and stream, or let a scheduler with these "
            "options claim once"
        ) from None
    subjects = list(info.config.subjects or [])
    if subjects == [strategy.pattern]:
        return
    for other in STRATEGIES.values():
        if other.name != strategy.name and subjects == [other(options).pattern]:
            raise ConfigError(
                f"NATS at {link.where}: stream {name} holds the claims of strategy={other.name} "
                f"(subjects {subjects}), not of strategy={strategy.name}: add "
                f"strategy={other.name} to the URL"
            )
    raise ConfigError(
        f"NATS at {link.where}: stream {name} is not anarchon's claims stream of prefix "
        f"{options.prefix!r}: its subjects are {subjects}, expected {[strategy.pattern]}. Check "
        "the prefix and stream options"
    )
