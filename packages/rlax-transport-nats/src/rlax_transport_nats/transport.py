"""The ``nats`` transport: one connection per process, the store and queues on it."""

from __future__ import annotations

import threading

from rlax_core.contracts.transport import Transport
from rlax_transport_nats.config import NatsTransportConfig
from rlax_transport_nats.connection import NatsConnection
from rlax_transport_nats.parameter_store import NatsParameterStore
from rlax_transport_nats.queue import NatsQueue


class NatsTransport(Transport):
    """The run's parameter store and queues on NATS JetStream.

    Every process of a run builds one from the same config and sees the same store and
    queues. The connection is made lazily, by the first store or queue asked for.

    Args:
        config: the transport settings.
    """

    def __init__(self, config: NatsTransportConfig | None = None) -> None:
        self.config = config or NatsTransportConfig()
        self._lock = threading.Lock()
        self._connection: NatsConnection | None = None
        self._store: NatsParameterStore | None = None
        self._queues: dict[str, NatsQueue] = {}

    def parameter_store(self) -> NatsParameterStore:
        with self._lock:
            if self._store is None:
                self._store = NatsParameterStore(self._connect(), self.config)
            return self._store

    def queue(self, name: str) -> NatsQueue:
        with self._lock:
            if name not in self._queues:
                self._queues[name] = NatsQueue(self._connect(), self.config, name)
            return self._queues[name]

    def close(self) -> None:
        with self._lock:
            if self._store is not None:
                self._store.close()
            for queue in self._queues.values():
                queue.close()
            if self._connection is not None:
                self._connection.close()

    def _connect(self) -> NatsConnection:
        if self._connection is None:
            self._connection = NatsConnection(self.config)
        return self._connection
