"""Throwaway TLS for testing a backend's TLS plumbing against real servers.

`CertBundle` makes a private certificate authority, a server certificate for ``127.0.0.1`` and
``localhost`` and a client certificate (mutual TLS), as PEM files a server and a store URL can
name. `TLSFront` puts TLS in front of a server that speaks none: it listens on
``127.0.0.1:<port>``, terminates TLS with the server certificate and forwards plain bytes, so a
store's ``amqps://`` path is tested without reconfiguring the shared
server. It is a `FaultProxy` subclass, so faults can be injected behind the TLS too; a protocol
that starts TLS inside itself (PostgreSQL's ``SSLRequest``) overrides `TLSFront._opened`, as
anarchon-postgres's tests do::

    certs = CertBundle.create(tmp_path)
    async with TLSFront("127.0.0.1", 5672, certs) as front:
        url = f"amqps://guest:guest@localhost:{front.port}/?cafile={certs.ca_file}"
        store = await anarchon.connect(url)

Needs ``trustme`` (``pip install anarchon-conformance[tls]``); the pytest plugin offers a
session-wide bundle as the ``anarchon_tls_certs`` fixture.
"""

from __future__ import annotations

import asyncio
import ssl
from pathlib import Path

import attrs

from .proxy import FaultProxy

__all__ = ["SERVER_HOSTS", "CertBundle", "TLSFront"]

SERVER_HOSTS = ("127.0.0.1", "localhost")
"""The names the server certificate is valid for."""


@attrs.frozen(kw_only=True)
class CertBundle:
    """A private CA and the certificates it signed, as PEM files in `directory`."""

    directory: Path
    ca_file: Path
    """The CA's certificate: what a client trusts (``tls_ca_file``, ``cafile``,
    ``sslrootcert``) and what a server verifying clients trusts."""
    server_cert_file: Path
    """The server's certificate chain, valid for `SERVER_HOSTS`."""
    server_key_file: Path
    client_cert_file: Path
    """A client certificate signed by the same CA, for servers that verify clients."""
    client_key_file: Path

    @classmethod
    def create(cls, directory: Path | str, *, hosts: tuple[str, ...] = SERVER_HOSTS) -> CertBundle:
        """A new CA with a server certificate for `hosts` and a client certificate, written to
        `directory` (created if missing). Each call makes a different CA."""
        try:
            import trustme
        except ImportError:
            raise ImportError(
                "anarchon_conformance.tls needs trustme: pip install anarchon-conformance[tls]"
            ) from None
        folder = Path(directory)
        folder.mkdir(parents=True, exist_ok=True)
        ca = trustme.CA(organization_name="anarchon test CA")
        server = ca.issue_cert(*hosts)
        client = ca.issue_cert("client.anarchon.test", common_name="anarchon-test-client")
        bundle = cls(
            directory=folder,
            ca_file=folder / "ca.pem",
            server_cert_file=folder / "server.pem",
            server_key_file=folder / "server.key",
            client_cert_file=folder / "client.pem",
            client_key_file=folder / "client.key",
        )
        ca.cert_pem.write_to_path(str(bundle.ca_file))
        for leaf, cert_file, key_file in (
            (server, bundle.server_cert_file, bundle.server_key_file),
            (client, bundle.client_cert_file, bundle.client_key_file),
        ):
            cert_file.write_bytes(b"".join(blob.bytes() for blob in leaf.cert_chain_pems))
            key_file.touch(mode=0o600)  # some servers refuse a key others may read
            leaf.private_key_pem.write_to_path(str(key_file))
        return bundle

    def store_options(
        self,
        *,
        client: bool = False,
        ca: str = "tls_ca_file",
        cert: str = "tls_cert_file",
        key: str = "tls_key_file",
    ) -> dict[str, str]:
        """Options of `anarchon.connect` that trust this CA and, with `client`, present the
        client certificate. The names are anarchon-redis' and anarchon-nats'; give a backend's
        own (anarchon-rabbitmq: ``ca="cafile", cert="certfile", key="keyfile"``)."""
        options = {ca: str(self.ca_file)}
        if client:
            options |= {cert: str(self.client_cert_file), key: str(self.client_key_file)}
        return options

    def server_context(self, *, verify_clients: bool = False) -> ssl.SSLContext:
        """A server-side context with the server certificate; `verify_clients` requires a
        client certificate signed by this CA."""
        context = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
        context.load_cert_chain(self.server_cert_file, self.server_key_file)
        if verify_clients:
            context.load_verify_locations(self.ca_file)
            context.verify_mode = ssl.CERT_REQUIRED
        return context

    def client_context(self, *, with_cert: bool = False) -> ssl.SSLContext:
        """A client-side context that trusts this CA only (host names checked), presenting the
        client certificate if `with_cert`."""
        context = ssl.create_default_context(cafile=str(self.ca_file))
        if with_cert:
            context.load_cert_chain(self.client_cert_file, self.client_key_file)
        return context


class TLSFront(FaultProxy):
    """Listens on ``127.0.0.1:<port>``, terminates TLS with `certs`' server certificate
    (requiring a client certificate if `verify_clients`), and forwards the plain bytes to
    ``target``. A client that fails the handshake never reaches the target."""

    def __init__(
        self,
        target_host: str,
        target_port: int,
        certs: CertBundle,
        *,
        verify_clients: bool = False,
        host: str = "127.0.0.1",
        port: int = 0,
    ) -> None:
        super().__init__(target_host, target_port, host=host, port=port)
        self.context = certs.server_context(verify_clients=verify_clients)
        self.handshakes = 0
        """TLS handshakes completed: proof that a client really came through the front."""

    def _listener_tls(self) -> ssl.SSLContext | None:
        return self.context

    async def _opened(
        self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter
    ) -> tuple[asyncio.StreamReader, asyncio.StreamWriter] | None:
        self.handshakes += 1
        return reader, writer
