"""A transport: the connection through which a run's processes share weights and queues."""

from __future__ import annotations

import ipaddress
from abc import ABC, abstractmethod
from dataclasses import dataclass

from rlax_core.contracts.parameter_store import ParameterStore
from rlax_core.contracts.queue import Queue


class Transport(ABC):
    """Hands out the run's parameter store and its named queues.

    A transport is created from its config by the plugin that registered it (``inproc``
    in rlax-core, ``nats`` and ``grpc`` in their own packages). Every process of a run
    creates its own transport from the same config and sees the same store and queues.
    """

    @abstractmethod
    def parameter_store(self) -> ParameterStore:
        """The run's parameter store (the same object on every call)."""

    @abstractmethod
    def queue(self, name: str) -> Queue:
        """The named queue (the same object on every call with the same name)."""

    @abstractmethod
    def close(self) -> None:
        """Closes the store and every queue handed out; idempotent."""

    def __enter__(self) -> Transport:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


@dataclass(frozen=True)
class ServerSecurity:
    """How exposed a transport server is.

    Attributes:
        host: the address it listens on (``0.0.0.0`` for every interface).
        authenticated: every client must present a credential the server checks.
        encrypted: clients connect over TLS.
    """

    host: str
    authenticated: bool
    encrypted: bool

    @property
    def loopback(self) -> bool:
        """Only this machine can connect (``127.0.0.0/8``, ``::1``, ``localhost``)."""
        host = self.host.strip("[]")
        if host == "localhost":
            return True
        try:
            return ipaddress.ip_address(host).is_loopback
        except ValueError:
            return False  # a name other than localhost may resolve anywhere

    @property
    def safe(self) -> bool:
        """Loopback, or authenticated and encrypted: what ``rlax serve`` accepts without
        ``--insecure``."""
        return self.loopback or (self.authenticated and self.encrypted)


class TransportServer(ABC):
    """The server process side of a networked transport (a NATS server, a gRPC service).

    A transport plugin whose clients need a server registers a factory for one through
    the ``register_transport_servers`` hook, under the transport's name and with the
    transport's config class: server and clients read the same settings (address,
    credentials, TLS files). ``rlax serve param-server --transport NAME`` and the
    launchers start it through the registry, so core never imports a plugin.

    Lifecycle: :meth:`start` returns once clients can connect; :meth:`stop` ends
    everything the server started and is idempotent.
    """

    @property
    @abstractmethod
    def address(self) -> str:
        """Where clients connect, e.g. ``nats://127.0.0.1:4222`` or ``127.0.0.1:50051``."""

    def security(self) -> ServerSecurity:
        """Where the server listens and whether it checks credentials and encrypts.

        The default reads the host from :attr:`address` and claims neither, so a server
        that does not say is treated as open; plugins override it.
        """
        hostport = self.address.split("://", 1)[-1]
        return ServerSecurity(hostport.rsplit(":", 1)[0], authenticated=False, encrypted=False)

    def load(self) -> dict[str, int]:
        """What the server holds and has refused so far (connections, waiting calls,
        refusals), by name, for ``rlax status``; empty for a server that does not count."""
        return {}

    @abstractmethod
    def start(self) -> None:
        """Starts serving; returns when clients can connect.

        Raises:
            RlaxError: the server cannot start (port taken, missing binary, bad TLS
                files); the message says what to fix.
        """

    @abstractmethod
    def running(self) -> bool:
        """Whether the server is still serving (False once it stopped or died)."""

    @abstractmethod
    def stop(self) -> None:
        """Stops serving and releases what :meth:`start` took; idempotent."""

    def __enter__(self) -> TransportServer:
        self.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()
