"""rlax-transport-nats: the parameter store and queues of RLAX on NATS JetStream."""

from rlax_transport_nats.config import NatsServerSettings, NatsTransportConfig
from rlax_transport_nats.connection import NatsConnection
from rlax_transport_nats.parameter_store import NatsParameterStore
from rlax_transport_nats.queue import NatsQueue
from rlax_transport_nats.server import NatsServerProcess
from rlax_transport_nats.transport import NatsTransport

__all__ = [
    "NatsConnection",
    "NatsParameterStore",
    "NatsQueue",
    "NatsServerProcess",
    "NatsServerSettings",
    "NatsTransport",
    "NatsTransportConfig",
]
