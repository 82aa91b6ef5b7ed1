"""The ``grpc`` transport: one channel per process, the store and queues on it."""

from __future__ import annotations

import threading

from rlax_core.contracts.transport import Transport
from rlax_transport_grpc.channel import GrpcChannel
from rlax_transport_grpc.config import GrpcTransportConfig
from rlax_transport_grpc.parameter_store import GrpcParameterStore
from rlax_transport_grpc.queue import GrpcQueue


class GrpcTransport(Transport):
    """The run's parameter store and queues on the gRPC parameter server.

    The channel is opened lazily, by the first store or queue asked for.

    Args:
        config: the transport settings.
    """

    def __init__(self, config: GrpcTransportConfig | None = None) -> None:
        self.config = config or GrpcTransportConfig()
        self._lock = threading.Lock()
        self._channel: GrpcChannel | None = None
        self._store: GrpcParameterStore | None = None
        self._queues: dict[str, GrpcQueue] = {}

    def parameter_store(self) -> GrpcParameterStore:
        with self._lock:
            if self._store is None:
                self._store = GrpcParameterStore(self._connect())
            return self._store

    def queue(self, name: str) -> GrpcQueue:
        with self._lock:
            if name not in self._queues:
                self._queues[name] = GrpcQueue(self._connect(), name)
            return self._queues[name]

    def close(self) -> None:
        with self._lock:
            if self._store is not None:
                self._store.close()
            for queue in self._queues.values():
                queue.close()
            if self._channel is not None:
                self._channel.close()

    def _connect(self) -> GrpcChannel:
        if self._channel is None:
            self._channel = GrpcChannel(self.config)
        return self._channel
