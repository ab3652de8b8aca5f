"""Claims on the wire: commands packed by hand and sent on a connection of the store's own pool.

redis-py packs every argument in Python, about 1 µs each here (an EVALSHA with four keys and one
argument: 9 µs; PING: 1 µs), and sends each command through its generic path (retry wrapper,
observability hooks, reply callbacks). A claim's keys and arguments are text we build, so a
whole command is one f-string per job, encoded once, and sent with the connection's
`send_packed_command`; replies are read with the connection's own parser, so timeouts,
disconnects on a broken connection and error replies behave as for any redis-py command.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from typing import Any

import redis.asyncio as aioredis
import redis.exceptions as rex

__all__ = ["bulk", "command", "evalsha", "send"]


def bulk(text: str) -> str:
    """`text` as a RESP bulk string."""
    size = len(text) if text.isascii() else len(text.encode())
    return f"${size}\r\n{text}\r\n"


def command(words: Sequence[str]) -> bytes:
    """A whole command (its words as text) in RESP."""
    return (f"*{len(words)}\r\n" + "".join([bulk(word) for word in words])).encode()


def evalsha(sha: str, key_count: int, keys: str, arg_count: int, args: str) -> bytes:
    """EVALSHA of the script `sha`, its `keys` and `args` given packed (`bulk`)."""
    return (
        f"*{3 + key_count + arg_count}\r\n$7\r\nEVALSHA\r\n$40\r\n{sha}\r\n"
        f"{bulk(str(key_count))}{keys}{args}"
    ).encode()


async def send(pool: aioredis.ConnectionPool, commands: Iterable[bytes]) -> list[Any]:
    """Send packed `commands` on one connection of `pool`, in order, and return their replies,
    an error reply as its `redis.exceptions.ResponseError` (the connection stays usable).

    `commands` may be a generator: the next command is built and sent while the server runs
    the one before, and a reply is read only once the next command is on its way, so the
    server always has work queued while the client parses."""
    conn = await pool.get_connection()  # type: ignore[no-untyped-call]
    try:
        replies: list[Any] = []
        pending = 0
        for packed in commands:
            await conn.send_packed_command(packed)
            pending += 1
            if pending > 1:
                replies.append(await _reply(conn))
                pending -= 1
        replies += [await _reply(conn) for _ in range(pending)]
        return replies
    finally:
        await pool.release(conn)


async def _reply(conn: Any) -> Any:
    try:
        return await conn.read_response()
    except rex.ResponseError as exc:  # read whole: the next reply starts right after it
        return exc
