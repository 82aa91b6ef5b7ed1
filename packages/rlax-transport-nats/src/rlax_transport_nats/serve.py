"""``rlax serve param-server --transport nats``: start a nats-server, or use a running one."""

from __future__ import annotations

import socket
from urllib.parse import urlparse

from rlax_core.contracts.transport import TransportServer
from rlax_core.errors import ConfigError
from rlax_transport_nats.config import NatsTransportConfig
from rlax_transport_nats.connection import NatsConnection
from rlax_transport_nats.parameter_store import NatsParameterStore
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
                max_payload_mb=self.config.server.max_payload_mb,
                monitoring_port=self.config.server.monitoring_port,
                die_with_parent=True,
            )
            self.process.start()
        # Create the parameter streams now, so the first publish and watch find them.
        NatsParameterStore(NatsConnection(self.config), self.config, owns_connection=True).close()

    def running(self) -> bool:
        if self.process is not None:
            return self.process.running()
        return _listening(self._host, self._port)

    def stop(self) -> None:
        if self.process is not None:
            self.process.stop()
            self.process = None


def _auth(config: NatsTransportConfig) -> NatsAuth:
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
