"""rlax-transport-grpc: the parameter server and queues of RLAX as a gRPC service."""

from rlax_transport_grpc.channel import GrpcChannel
from rlax_transport_grpc.config import GrpcServerSettings, GrpcTransportConfig
from rlax_transport_grpc.parameter_store import GrpcParameterStore
from rlax_transport_grpc.queue import GrpcQueue
from rlax_transport_grpc.server import GrpcParameterServer
from rlax_transport_grpc.transport import GrpcTransport

__all__ = [
    "GrpcChannel",
    "GrpcParameterServer",
    "GrpcParameterStore",
    "GrpcQueue",
    "GrpcServerSettings",
    "GrpcTransport",
    "GrpcTransportConfig",
]
