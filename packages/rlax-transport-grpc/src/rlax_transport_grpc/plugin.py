"""The rlax-transport-grpc plugin module, loaded through its ``rlax`` entry point.

Registers the ``grpc`` transport and its parameter server
(``rlax serve param-server --transport grpc``).
"""

from __future__ import annotations

from rlax_core.hookspecs import Register, hookimpl
from rlax_core.plugins.registry import BuildContext
from rlax_transport_grpc.config import GrpcTransportConfig
from rlax_transport_grpc.server import GrpcParameterServer
from rlax_transport_grpc.transport import GrpcTransport


def make_grpc_transport(config: GrpcTransportConfig, context: BuildContext) -> GrpcTransport:
    """Builds the transport; it connects when the store or a queue is first asked for."""
    return GrpcTransport(config)


def make_grpc_server(config: GrpcTransportConfig, context: BuildContext) -> GrpcParameterServer:
    """Builds the parameter server (started by ``rlax serve`` or a launcher)."""
    return GrpcParameterServer(config)


@hookimpl
def register_transports(register: Register) -> None:
    """Registers the ``grpc`` transport."""
    register("grpc", make_grpc_transport, GrpcTransportConfig)


@hookimpl
def register_transport_servers(register: Register) -> None:
    """Registers the ``grpc`` parameter server."""
    register("grpc", make_grpc_server, GrpcTransportConfig)
