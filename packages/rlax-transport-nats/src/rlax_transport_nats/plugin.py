"""The rlax-transport-nats plugin module, loaded through its ``rlax`` entry point.

Registers the ``nats`` transport (parameter store and queues on JetStream) and its
server (``rlax serve param-server --transport nats``).
"""

from __future__ import annotations

from rlax_core.hookspecs import Register, hookimpl
from rlax_core.plugins.registry import BuildContext
from rlax_transport_nats.config import NatsTransportConfig
from rlax_transport_nats.serve import NatsTransportServer
from rlax_transport_nats.transport import NatsTransport


def make_nats_transport(config: NatsTransportConfig, context: BuildContext) -> NatsTransport:
    """Builds the transport; it connects when the store or a queue is first asked for."""
    return NatsTransport(config)


def make_nats_server(config: NatsTransportConfig, context: BuildContext) -> NatsTransportServer:
    """Builds the server side: starts a nats-server, or uses the one already running."""
    return NatsTransportServer(config)


@hookimpl
def register_transports(register: Register) -> None:
    """Registers the ``nats`` transport."""
    register("nats", make_nats_transport, NatsTransportConfig)


@hookimpl
def register_transport_servers(register: Register) -> None:
    """Registers the ``nats`` transport's server."""
    register("nats", make_nats_server, NatsTransportConfig)
