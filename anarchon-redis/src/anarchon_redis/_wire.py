"""Claims on the wire: commands packed by hand and sent on a connection of the store's own pool.

redis-py packs every argument in Python, about 1 µs each here (an EVALSHA with four keys and one
argument: 9 µs; PING: 1 µs), and sends each command through its generic path (retry wrapper,
observability hooks, reply callbacks). A claim's keys and arguments are text we build, so a
whole command is one f-string per job, encoded once, and sent with the connection's
`send_packed_command`; replies are read with the connection's own parser, so timeouts,
disconnects on a broken connection and error replies behave as for any redis-py command.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Sequence
from typing import Any, Protocol

import redis.exceptions as rex

__all__ = ["Pool", "bulk", "call", "call_many", "command", "invoke", "send"]


class Pool(Protocol):
    """Where a packed command gets its connection: a redis-py pool, or a cluster node's
    connections (`anarchon_redis._connection.NodePool`)."""

    async def get_connection(self) -> Any: ...

    async def release(self, connection: Any) -> Any: ...


def bulk(text: str) -> str:
    """`text` as a RESP bulk string."""
    size = len(text) if text.isascii() else len(text.encode())
    return f"${size}\r\n{text}\r\n"


def command(words: Sequence[str]) -> bytes:
    """A whole command (its words as text) in RESP."""
    return (f"*{len(words)}\r\n" + "".join([bulk(word) for word in words])).encode()


def invoke(head: str, key_count: int, keys: str, arg_count: int, args: str) -> bytes:
    """A script or function call: `head` is its first two words packed (``EVALSHA <sha>`` or
    ``FCALL <name>``), `keys` and `args` are given packed (`bulk`)."""
    return (f"*{3 + key_count + arg_count}\r\n{head}{bulk(str(key_count))}{keys}{args}").encode()


async def call(pool: Pool, packed: bytes) -> Any:
    """One packed command on a connection of `pool`: its reply; an error reply is raised as
    its `redis.exceptions.ResponseError` (the connection stays usable)."""
    conn = await pool.get_connection()
    try:
        await _send_small(conn, packed)
        return await conn.read_response()
    finally:
        await pool.release(conn)


async def call_many(pool: Pool, packed: bytes, count: int) -> list[Any]:
    """`count` packed commands, written together (one write, one round trip) on a connection
    of `pool`: their replies in order, an error reply as its `redis.exceptions.ResponseError`
    (read whole, so the connection stays usable)."""
    conn = await pool.get_connection()
    try:
        await _send_small(conn, packed)
        return [await _reply(conn) for _ in range(count)]
    finally:
        await pool.release(conn)


SMALL = 16_384
"""Bytes a command may have to be written without a timeout: far below the 64 KiB at which an
asyncio transport asks the writer to wait, so its write cannot block."""


async def _send_small(conn: Any, packed: bytes) -> None:
    """`send_packed_command` without its timeout for a small command: with a socket timeout
    redis-py runs every write as a task of its own under ``asyncio.wait_for``, an extra turn of
    the event loop (about 10 µs here) for a write that cannot block. The reply is still read
    under the timeout."""
    timeout = conn.socket_timeout
    if not timeout or len(packed) > SMALL:
        await conn.send_packed_command(packed)
        return
    conn.socket_timeout = None  # the connection is ours until released
    try:
        await conn.send_packed_command(packed)
    finally:
        conn.socket_timeout = timeout


async def send(
    pool: Pool,
    commands: Iterable[bytes],
    take: Callable[[int, Any], None] | None = None,
) -> list[Any]:
    """Send packed `commands` on one connection of `pool`, in order, and return their replies,
    an error reply as its `redis.exceptions.ResponseError` (the connection stays usable);
    `take(i, reply)`, if given, gets each reply as soon as it is read.

    `commands` may be a generator: the next command is built and sent while the server runs
    the one before, and a reply is read (and taken) only once the next command is on its way,
    so the server always has work queued while the client packs and parses."""
    conn = await pool.get_connection()
    try:
        replies: list[Any] = []
        sent = 0
        for packed in commands:
            await _send_small(conn, packed)
            sent += 1
            if sent - len(replies) > 1:
                _taken(replies, await _reply(conn), take)
        while len(replies) < sent:
            _taken(replies, await _reply(conn), take)
        return replies
    finally:
        await pool.release(conn)


def _taken(replies: list[Any], reply: Any, take: Callable[[int, Any], None] | None) -> None:
    replies.append(reply)
    if take is not None:
        take(len(replies) - 1, reply)


async def _reply(conn: Any) -> Any:
    try:
        return await conn.read_response()
    except rex.ResponseError as exc:  # read whole: the next reply starts right after it
        return exc
