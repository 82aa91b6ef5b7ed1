"""The ``nats`` transport: one connection per process, the store and queues on it."""

from __future__ import annotations

from rlax_core.kit.transport import LazyTransport
from rlax_transport_nats.config import NatsTransportConfig
from rlax_transport_nats.connection import NatsConnection
from rlax_transport_nats.parameter_store import NatsParameterStore
from rlax_transport_nats.queue import NatsQueue


class NatsTransport(
    LazyTransport[NatsTransportConfig, NatsConnection, NatsParameterStore, NatsQueue]
):
    """The run's parameter store and queues on NATS JetStream (connected when first used).

    Args:
        config: the transport settings.
    """

    def __init__(self, config: NatsTransportConfig | None = None) -> None:
        super().__init__(config or NatsTransportConfig())

    def connect(self) -> NatsConnection:
        return NatsConnection(self.config)

    def open_store(self, connection: NatsConnection) -> NatsParameterStore:
        return NatsParameterStore(connection, self.config)

    def open_queue(self, connection: NatsConnection, name: str) -> NatsQueue:
        return NatsQueue(connection, self.config, name)
