"""``rlax serve param-server --transport nats``: start a nats-server, or use a running one.

With ``server.credentials_dir`` the server lets each role in with its own secret and
gives it its part only (:mod:`~rlax_transport_nats.permissions`), and ``rlax serve``
creates the run's streams and queues as the trainer, so workers and verifiers that start
first find them. With ``server.tls_cert_file`` it serves TLS (``verify_clients``: mutual
TLS). :meth:`NatsTransportServer.security` tells ``rlax serve`` whether a non-loopback
address is safe to serve on: authenticated and encrypted.
"""

from __future__ import annotations

import socket
import sys
from urllib.parse import urlparse

from rlax_core.contracts.transport import ServerSecurity, TransportServer
from rlax_core.errors import ConfigError, TransportAuthError
from rlax_core.kit.transport import read_server_credentials
from rlax_transport_nats.config import NatsTransportConfig
from rlax_transport_nats.connection import NatsConnection
from rlax_transport_nats.parameter_store import NatsParameterStore
from rlax_transport_nats.permissions import QUEUE_ROLES
from rlax_transport_nats.queue import NatsQueue
from rlax_transport_nats.server import NatsAuth, NatsServerProcess

_LOCAL_HOSTS = {"127.0.0.1", "localhost", "::1", "0.0.0.0"}


class NatsTransportServer(TransportServer):
    """Makes sure a JetStream server runs at the first configured URL, with the streams.

    If something already listens there, it is used as it is (a NATS cluster run by
    others); otherwise, for a local address, a nats-server is started with the config's
    credentials, TLS certificate and store folder, and stopped by :meth:`stop`.

    Args:
        config: the transport settings (clients use the same ones).
    """

    def __init__(self, config: NatsTransportConfig) -> None:
        self.config = config
        url = urlparse(config.servers[0])
        if url.hostname is None or url.port is None:
            raise ConfigError(
                f"servers[0] = {config.servers[0]!r} needs a host and a port, "
                "e.g. nats://127.0.0.1:4222"
            )
        self._host, self._port = url.hostname, url.port
        self.process: NatsServerProcess | None = None

    @property
    def address(self) -> str:
        return self.config.servers[0]

    def security(self) -> ServerSecurity:
        """Where it listens; authenticated when every client must log in (a credential
        per role, or the lab token, user or nkey); encrypted when it serves TLS."""
        config = self.config
        authenticated = _auth(config).required
        encrypted = config.server.tls_cert_file is not None
        if self.process is None and _listening(self._host, self._port):
            # Run by others: what this config's clients use is what it asks of them.
            encrypted = encrypted or urlparse(self.address).scheme == "tls"
        return ServerSecurity(self._host, authenticated=authenticated, encrypted=encrypted)

    def start(self) -> None:
        if not _listening(self._host, self._port):
            if self._host not in _LOCAL_HOSTS:
                raise ConfigError(
                    f"nothing listens at {self.address} and it is not a local address, so "
                    "no nats-server can be started for it; start one there or fix servers"
                )
            self.process = NatsServerProcess(
                host=self._host,
                port=self._port,
                store_dir=self.config.server.store_dir,
                auth=_auth(self.config),
                tls_cert_file=self.config.server.tls_cert_file,
                tls_key_file=self.config.server.tls_key_file,
                tls_ca_file=self.config.tls_ca_file,
                verify_clients=self.config.server.verify_clients,
                max_payload_mb=self.config.server.max_payload_mb,
                monitoring_port=self.config.server.monitoring_port,
                die_with_parent=True,
            )
            self.process.start()
        self._create_streams()

    def running(self) -> bool:
        if self.process is not None:
            return self.process.running()
        return _listening(self._host, self._port)

    def stop(self) -> None:
        if self.process is not None:
            self.process.stop()
            self.process = None

    def _create_streams(self) -> None:
        """Creates the parameter streams and the run's queues, so that the first publish,
        watch and lease find them."""
        config = self.config
        directory = config.server.credentials_dir
        if directory is not None:  # as the trainer: the one role that creates streams
            local = "127.0.0.1" if self._host in ("0.0.0.0", "::") else self._host
            scheme = urlparse(self.address).scheme or "nats"
            config = config.model_copy(
                update={
                    "credentials_file": directory / "trainer",
                    "servers": [f"{scheme}://{local}:{self._port}"],
                }
            )
            if config.server.verify_clients and config.tls_cert_file is None:
                print(
                    "rlax serve: mutual TLS and no client certificate here, so the trainer "
                    "will create the streams and queues when it starts",
                    file=sys.stderr,
                    flush=True,
                )
                return
        try:
            store = NatsParameterStore(NatsConnection(config), config, owns_connection=True)
        except TransportAuthError as exc:
            if directory is None:
                raise
            print(f"rlax serve: the trainer will create the streams ({exc})", file=sys.stderr)
            return
        try:
            for name in QUEUE_ROLES:
                NatsQueue(store.connection, config, name).close()
        finally:
            store.close()


def _auth(config: NatsTransportConfig) -> NatsAuth:
    directory = config.server.credentials_dir
    if directory is not None:
        return NatsAuth(
            roles=read_server_credentials(directory),
            namespace=config.namespace,
            max_lease_s=config.server.max_lease_s,
        )
    nkey = None
    if config.nkey_seed_file is not None:
        import nkeys

        nkey = nkeys.from_seed(config.nkey_seed_file.read_bytes().strip()).public_key.decode()
    return NatsAuth(user=config.user, password=config.password, token=config.token, nkey=nkey)


def _listening(host: str, port: int) -> bool:
    try:
        with socket.create_connection((host, port), timeout=1.0):
            return True
    except OSError:
        return False
