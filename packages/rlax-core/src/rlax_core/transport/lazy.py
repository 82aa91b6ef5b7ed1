"""A transport whose connection is made by the first store or queue asked for.

Networked transports (NATS, gRPC, a third party's) share one shape: one connection per
process, the parameter store and every named queue on it, each handed out once and
closed with the transport. A plugin subclasses :class:`LazyTransport` and fills in how
to connect and how to open a store and a queue on the connection.
"""

from __future__ import annotations

import threading
from abc import abstractmethod
from typing import Generic, Protocol, TypeVar

from pydantic import BaseModel

from rlax_core.contracts.parameter_store import ParameterStore
from rlax_core.contracts.queue import Queue
from rlax_core.contracts.transport import Transport
from rlax_core.transport.signing import verifying


class Closable(Protocol):
    """A connection: anything with ``close()``."""

    def close(self) -> None:
        """Releases the connection."""


ConfigT = TypeVar("ConfigT", bound=BaseModel)
ConnectionT = TypeVar("ConnectionT", bound=Closable)
StoreT = TypeVar("StoreT", bound=ParameterStore)
QueueT = TypeVar("QueueT", bound=Queue)


class LazyTransport(Transport, Generic[ConfigT, ConnectionT, StoreT, QueueT]):
    """The run's store and queues on one connection, made when first needed.

    Every process of a run builds one from the same config and sees the same store and
    queues. Closing it closes the store, the queues, then the connection; it is
    idempotent and thread-safe.

    Args:
        config: the transport's settings (the plugin's config class).
    """

    def __init__(self, config: ConfigT) -> None:
        self.config = config
        self._lock = threading.Lock()
        self._connection: ConnectionT | None = None
        self._store: StoreT | None = None
        self._reader: ParameterStore | None = None
        self._queues: dict[str, QueueT] = {}

    @abstractmethod
    def connect(self) -> ConnectionT:
        """Opens the connection (called once, under the transport's lock)."""

    @abstractmethod
    def open_store(self, connection: ConnectionT) -> StoreT:
        """The parameter store on ``connection`` (it must not close the connection)."""

    @abstractmethod
    def open_queue(self, connection: ConnectionT, name: str) -> QueueT:
        """The queue ``name`` on ``connection`` (it must not close the connection)."""

    def parameter_store(self) -> ParameterStore:
        """The store (verifying every version's signature when the run signs its weights:
        ``signing`` in the config)."""
        with self._lock:
            if self._store is None:
                self._store = self.open_store(self._connected())
                self._reader = verifying(self._store, getattr(self.config, "signing", None))
            return self._reader

    def queue(self, name: str) -> QueueT:
        with self._lock:
            if name not in self._queues:
                self._queues[name] = self.open_queue(self._connected(), name)
            return self._queues[name]

    def close(self) -> None:
        with self._lock:
            if self._store is not None:
                self._store.close()
            for queue in self._queues.values():
                queue.close()
            if self._connection is not None:
                self._connection.close()

    def _connected(self) -> ConnectionT:
        if self._connection is None:
            self._connection = self.connect()
        return self._connection
