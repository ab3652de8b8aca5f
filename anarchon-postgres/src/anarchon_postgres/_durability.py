"""``durability=replicated``: refuse to open unless the server answers a commit only once a
synchronous standby has it, so a failover to that standby cannot forget a `won` (C1).

With asynchronous replication (PostgreSQL's default) a primary acknowledges a claim before its
standby has received it; if the primary then dies and the standby is promoted, the claim is gone
and a second instance can win the same run. ``synchronous_standby_names`` (a standby, or ``ANY n``
/ ``FIRST n`` of several) with ``synchronous_commit`` ``on`` or ``remote_apply`` makes every commit
wait until a synchronous standby has flushed it. ``remote_write`` (written, not flushed, on the
standby) and ``local``/``off`` are refused: they answer before the standby is safe.
"""

from __future__ import annotations

import logging

from psycopg import AsyncConnection

from anarchon import ConfigError

__all__ = ["DURABILITY", "SAFE_SYNCHRONOUS_COMMIT", "check_replicated"]

log = logging.getLogger("anarchon.postgres")

DURABILITY = ("local", "replicated")
"""The values of the ``durability`` option: ``local`` (whatever the server does, the default)
or ``replicated`` (checked at open: `check_replicated`)."""

SAFE_SYNCHRONOUS_COMMIT = ("on", "remote_apply")
"""``synchronous_commit`` values that wait for a synchronous standby to flush the commit."""

_SETTINGS = """
SELECT pg_is_in_recovery(), current_setting('synchronous_standby_names'),
       current_setting('synchronous_commit'),
       (SELECT count(*) FROM pg_catalog.pg_stat_replication
         WHERE sync_state IN ('sync', 'quorum'))
"""


async def check_replicated(conn: AsyncConnection[tuple[object, ...]], where: str) -> None:
    """Raise `ConfigError` unless `conn`'s server waits for a synchronous standby on commit
    (``synchronous_standby_names`` set and ``synchronous_commit`` in `SAFE_SYNCHRONOUS_COMMIT`
    for this session); log a warning when no synchronous standby is connected right now
    (commits then wait until one is)."""
    cur = await conn.execute(_SETTINGS)
    row = await cur.fetchone()
    assert row is not None
    in_recovery, standby_names, synchronous_commit, connected = row
    fix = (
        "set synchronous_standby_names to your replicas by name (for example "
        "'ANY 1 (replica1, replica2)'; not '*', which pg_basebackup's WAL stream satisfies) in "
        "postgresql.conf of the primary and of every server that may be promoted, and keep "
        "synchronous_commit = on (or remote_apply); or drop durability=replicated to accept "
        "that a failover may let a second instance win a run"
    )
    if in_recovery:
        return  # a standby: claims fail with the read-only error; nothing to check here
    if not str(standby_names).strip():
        raise ConfigError(
            f"PostgreSQL at {where}: durability=replicated needs a synchronous standby, but "
            f"synchronous_standby_names is empty (commits do not wait for any replica): {fix}"
        )
    if synchronous_commit not in SAFE_SYNCHRONOUS_COMMIT:
        raise ConfigError(
            f"PostgreSQL at {where}: durability=replicated needs synchronous_commit on or "
            f"remote_apply, but this session has {synchronous_commit!r} (a commit is then "
            "acknowledged before the standby has flushed it): set it back with ALTER ROLE or "
            "ALTER DATABASE ... SET synchronous_commit = on, or in postgresql.conf"
        )
    if not connected:
        log.warning(
            "PostgreSQL at %s: no synchronous standby is connected (synchronous_standby_names "
            "= %r); every claim waits until one is",
            where,
            standby_names,
        )
