"""The ``grpc`` transport: one channel per process, the store and queues on it."""

from __future__ import annotations

from rlax_core.kit.transport import LazyTransport
from rlax_transport_grpc.channel import GrpcChannel
from rlax_transport_grpc.config import GrpcTransportConfig
from rlax_transport_grpc.parameter_store import GrpcParameterStore
from rlax_transport_grpc.queue import GrpcQueue


class GrpcTransport(LazyTransport[GrpcTransportConfig, GrpcChannel, GrpcParameterStore, GrpcQueue]):
    """The run's parameter store and queues on the gRPC parameter server (opened when used).

    Args:
        config: the transport settings.
    """

    def __init__(self, config: GrpcTransportConfig | None = None) -> None:
        super().__init__(config or GrpcTransportConfig())

    def connect(self) -> GrpcChannel:
        return GrpcChannel(self.config)

    def open_store(self, channel: GrpcChannel) -> GrpcParameterStore:
        return GrpcParameterStore(channel)

    def open_queue(self, channel: GrpcChannel, name: str) -> GrpcQueue:
        return GrpcQueue(channel, name)
