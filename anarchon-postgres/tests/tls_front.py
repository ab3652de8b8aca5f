"""A TLS front for PostgreSQL, for the ``sslmode`` tests: the kit's `TLSFront` (TLS in front of
a server that speaks none, plain bytes behind) with PostgreSQL's own way of starting TLS.

libpq opens in plain text with an 8-byte ``SSLRequest``; the front answers ``S`` and then does
the TLS handshake (a ``GSSENCRequest`` is declined with ``N`` first). A client that does not ask
for TLS (``sslmode=disable``) is hung up on. Test support: it lives in this test tree, not in a
wheel."""

from __future__ import annotations

import asyncio
import ssl
import struct
import sys

from anarchon_conformance.tls import TLSFront

__all__ = ["GSSENC_REQUEST", "SSL_REQUEST", "PostgresTLSFront"]

SSL_REQUEST = 80877103
GSSENC_REQUEST = 80877104


class PostgresTLSFront(TLSFront):
    """A `TLSFront` that answers libpq's ``SSLRequest`` before the handshake (see the module)."""

    def _listener_tls(self) -> ssl.SSLContext | None:
        return None  # TLS starts inside the protocol, in `_opened`

    async def _opened(
        self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter
    ) -> tuple[asyncio.StreamReader, asyncio.StreamWriter] | None:
        try:
            for _ in range(2):
                length, code = struct.unpack("!ii", await reader.readexactly(8))
                if length != 8 or code not in (SSL_REQUEST, GSSENC_REQUEST):
                    return None
                if code == SSL_REQUEST:
                    # No await between this answer and the upgrade: the client's handshake
                    # must reach the TLS layer, not the plain reader's buffer.
                    writer.write(b"S")
                    writer = await _start_tls(reader, writer, self.context)
                    return await super()._opened(reader, writer)
                writer.write(b"N")
        except (OSError, asyncio.IncompleteReadError):
            return None  # ssl.SSLError is an OSError: a refused handshake
        return None


async def _start_tls(
    reader: asyncio.StreamReader, writer: asyncio.StreamWriter, context: ssl.SSLContext
) -> asyncio.StreamWriter:
    """Upgrade a server-side connection to TLS in place; the writer to use from then on."""
    if sys.version_info >= (3, 11):
        await writer.start_tls(context)
        return writer
    loop = asyncio.get_running_loop()
    protocol = writer.transport.get_protocol()
    transport = await loop.start_tls(writer.transport, protocol, context, server_side=True)
    if transport is None:
        raise ConnectionError("the connection closed during the TLS handshake")
    return asyncio.StreamWriter(transport, protocol, reader, loop)
