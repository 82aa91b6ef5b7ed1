"""A transport: the connection through which a run's processes share weights and queues."""

from __future__ import annotations

from abc import ABC, abstractmethod

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
